"""CPU layout parsers (lscpu -p, lscpu, numactl -H, sysfs) over real captures in tests/fixtures/lscpu/, and the
OS-CPU-id -> Slurm logical core mapping gres.conf `Cores=` needs."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.topology import format_cpulist, parse_topo
from slurmkit.topology.cpus import parse_cpu_layout, parse_lscpu_p, read_sysfs, resolve

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def layout(name):
    return parse_cpu_layout((FIX / "lscpu" / name).read_text(), path=name)


def node_cores(lay):
    return {n: format_cpulist(lay.cores_for(c)) for n, c in lay.numa_cpus.items() if c}


def test_lscpu_p_interleaved_xeon_maps_os_ids_to_logical_cores():
    lay = layout("xeon-x5650-2s-interleaved-numa-lscpu-p.txt")
    assert (lay.sockets, lay.cores_per_socket, lay.threads_per_core, lay.exact) == (2, 6, 1, True)
    assert lay.numa_cpus == {0: [0, 2, 4, 6, 8, 10], 1: [1, 3, 5, 7, 9, 11]}
    # socket 0 holds the even CPUs: they are Slurm cores 0-5, the odd ones 6-11
    assert [lay.core_of(c) for c in range(12)] == [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]
    assert node_cores(lay) == {0: "0-5", 1: "6-11"}


def test_legacy_lscpu_summary_of_the_same_machine_derives_the_same_mapping():
    lay = layout("xeon-x5650-2s-interleaved-numa-lscpu-legacy.txt")
    assert (lay.sockets, lay.cores_per_socket, lay.threads_per_core, lay.exact) == (2, 6, 1, False)
    exact = layout("xeon-x5650-2s-interleaved-numa-lscpu-p.txt")
    assert lay.cpu_core == exact.cpu_core and lay.cpu_socket == exact.cpu_socket


def test_princeton_pli_lscpu_and_numactl():
    lay = layout("princeton-pli-h100-node-xeon8468-lscpu.txt")
    assert (lay.sockets, lay.cores_per_socket, lay.threads_per_core) == (2, 48, 1)
    assert node_cores(lay) == {0: "0-47", 1: "48-95"}
    assert lay.core_of(94) == 47 and lay.core_of(1) == 48
    num = layout("princeton-pli-h100-node-numactl-H.txt")
    assert num.numa_cpus == lay.numa_cpus
    assert num.sockets == 2 and any("socket count unknown" in n for n in num.notes)


def test_epyc_nps4_smt_siblings_share_a_core():
    lay = layout("epyc-2s-nps4-8xmi210-lscpu-numa-snippet.txt")
    assert (lay.sockets, lay.cores_per_socket, lay.threads_per_core) == (2, 64, 2)
    assert node_cores(lay) == {0: "0-15", 1: "16-31", 2: "32-47", 3: "48-63", 4: "64-79", 5: "80-95",
                               6: "96-111", 7: "112-127"}
    assert lay.core_of(0) == lay.core_of(128) == 0
    assert lay.core_of(255) == 127 and lay.cpu_socket[200] == 1


def test_power9_cpuless_gpu_memory_nodes_are_kept_empty():
    lay = layout("princeton-traverse-power9-4xv100-lscpu-gpu-numa-nodes-252-255.txt")
    assert (lay.sockets, lay.cores_per_socket, lay.threads_per_core) == (2, 16, 4)
    assert sorted(lay.numa_cpus) == [0, 8, 252, 253, 254, 255]
    assert lay.numa_cpus[252] == [] and node_cores(lay) == {0: "0-15", 8: "16-31"}


def test_kunpeng_socket_dash_and_gh200_excerpt():
    lay = layout("kunpeng-aarch64-320cpu-8numa-socket-dash-vllm-ascend-3974.txt")
    assert lay.sockets == 8 and any("socket count unknown" in n for n in lay.notes)
    gh = layout("gh200-lscpu-numa-section-9-nodes-xpu-perf-129.txt")
    assert gh.numa_cpus[0] == list(range(72)) and gh.numa_cpus[8] == []


def test_memoryless_numactl_nodes():
    lay = layout("epyc-7401-2s-8-numa-nodes-6-memoryless-numactl-hardware-no-distances.txt")
    assert lay.numa_cpus[5] == list(range(3, 96, 8))


def test_resolve_fills_princeton_gpus_from_numa_and_warns():
    topo = parse_topo((FIX / "topo" / "princeton-della-pli-h100-8gpu-nv18-6nic-odd-cpu-affinity.txt").read_text())
    resolve(topo, layout("princeton-pli-h100-node-xeon8468-lscpu.txt"))
    assert topo.gpus[0].cpus == list(range(0, 96, 2)) and topo.gpus[7].cpus == list(range(1, 96, 2))
    assert any(w.startswith("GPU0-7: CPU set taken from their NUMA node(s)") for w in topo.warnings)


def test_resolve_warns_on_numa_off_with_two_sockets_and_spanning_affinity():
    topo = parse_topo((FIX / "topo" / "hopper-8gpu-nv18-12nic-numa-off-aihub0007.txt").read_text())
    # synthetic lscpu -p for a 2 x 48-core SMT2 host booted with numa=off (every CPU on node 0)
    rows = ["# CPU,Core,Socket,Node"] + [f"{c},{c % 96},{(c % 96) // 48},0" for c in range(192)]
    resolve(topo, parse_lscpu_p("\n".join(rows) + "\n", path="synthetic-numa-off-lscpu-p"))
    assert any(w.startswith("NUMA disabled: 2 sockets but 1 NUMA node") for w in topo.warnings)
    assert any(w.startswith("GPU0-7: CPU affinity spans sockets 0-1") for w in topo.warnings)


@pytest.mark.parametrize("text,line,msg", [
    ("0,0,0,0\n", 1, "no `# CPU,Core,Socket,Node` header"),
    ("# CPU,Core,Socket,Node\n0,0,0,0\n1,x,0,0\n", 3, "CORE field 'x' is not a number"),
    ("# CPU,Core,Socket,Node\n0,0,0\n", 2, "expected 4 comma-separated fields"),
])
def test_bad_lscpu_p_names_the_line(text, line, msg):
    with pytest.raises(UsageError, match=msg) as e:
        parse_cpu_layout(text, path="f")
    assert e.value.line == line


def test_unrecognised_cpu_layout():
    with pytest.raises(UsageError, match="not `lscpu -p`"):
        parse_cpu_layout("hello\n", path="f")


def test_sysfs_of_this_machine_agrees_with_its_own_lscpu_p():
    import shutil
    import subprocess
    if not shutil.which("lscpu"):
        pytest.skip("no lscpu here")
    out = subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET,NODE"], capture_output=True, text=True, check=True).stdout
    a, b = read_sysfs(), parse_lscpu_p(out)
    assert a.sockets == b.sockets and a.cpu_socket == b.cpu_socket
    assert sorted(a.cpu_core) == sorted(b.cpu_core)


def _sysfs(tmp_path, layout):
    """SYNTHETIC sysfs tree: layout = {cpu: (core_id, package_id, node)}."""
    base = tmp_path / "sys" / "devices" / "system"
    for cpu, (core, pkg, node) in layout.items():
        t = base / "cpu" / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True)
        (t / "core_id").write_text(f"{core}\n")
        (t / "physical_package_id").write_text(f"{pkg}\n")
    nodes = {}
    for cpu, (_, _, node) in layout.items():
        nodes.setdefault(node, []).append(cpu)
    for node, cpus in nodes.items():
        d = base / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(format_cpulist(cpus) + "\n")
    return str(tmp_path)


def test_read_sysfs_synthetic_interleaved_smt_tree(tmp_path):
    # 2 sockets x 2 cores x 2 threads, interleaved: even CPUs socket 0; core_id repeats per socket (as on Intel)
    lay = {0: (0, 0, 0), 1: (0, 1, 1), 2: (1, 0, 0), 3: (1, 1, 1), 4: (0, 0, 0), 5: (0, 1, 1), 6: (1, 0, 0),
           7: (1, 1, 1)}
    got = read_sysfs(_sysfs(tmp_path, lay))
    assert (got.sockets, got.cores_per_socket, got.threads_per_core) == (2, 2, 2)
    assert [got.core_of(c) for c in range(8)] == [0, 2, 1, 3, 0, 2, 1, 3]
    assert got.numa_cpus == {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}


def test_pci_numa_node(tmp_path):
    from slurmkit.topology.cpus import pci_numa_node
    d = tmp_path / "sys" / "bus" / "pci" / "devices"
    (d / "0000:3b:00.0").mkdir(parents=True)
    (d / "0000:3b:00.0" / "numa_node").write_text("1\n")
    (d / "0000:5e:00.0").mkdir()
    (d / "0000:5e:00.0" / "numa_node").write_text("-1\n")
    assert pci_numa_node("0000:3B:00.0", str(tmp_path)) == 1
    assert pci_numa_node("0000:5e:00.0", str(tmp_path)) is None  # -1: the platform does not say
    assert pci_numa_node("0000:00:00.0", str(tmp_path)) is None


# --- Issue 17 (T1): hostile numbers, folded from test_hardening_health.py --------------------------------------------

def test_t1_lscpu_cpu_id_of_5000_digits_is_an_error():
    with pytest.raises(UsageError, match="not a number"):
        parse_cpu_layout("# CPU,Core,Socket,Node\n" + "1" * 5000 + ",0,0,0\n", path="l.txt")
