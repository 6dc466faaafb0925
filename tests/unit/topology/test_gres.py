"""gres.conf generation: logical Cores=, Links= for NVLink, grouped File= for PCIe boxes."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.topology import parse_topo
from slurmkit.topology.cpus import parse_cpu_layout, parse_lscpu_p, resolve
from slurmkit.topology.gres import gres_conf_lines

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def topo(name, lscpu=None, lscpu_text=None):
    t = parse_topo((FIX / "topo" / name).read_text(), path=name)
    lay = None
    if lscpu or lscpu_text:
        lay = parse_cpu_layout(lscpu_text or (FIX / "lscpu" / lscpu).read_text())
        resolve(t, lay)
    return t, lay


def body(lines):
    return [ln for ln in lines if not ln.startswith("#")]


def test_pcie_box_one_line_per_socket_with_logical_cores():
    # synthetic lscpu -p for the 2 x 14-core SMT2 host the matrix's affinity (0-13,28-41 / 14-27,42-55) implies
    rows = ["# CPU,Core,Socket,Node"] + [f"{c},{c % 28},{(c % 28) // 14},{(c % 28) // 14}" for c in range(56)]
    t, lay = topo("pcie-8gpu-pix-phb-sys-2socket-nccl-1439-spaces.txt", lscpu_text="\n".join(rows) + "\n")
    lines = gres_conf_lines(t, lay, node_name="gpu01", gpu_type="rtx")
    assert body(lines) == ["NodeName=gpu01 Name=gpu Type=rtx File=/dev/nvidia[0-3] Cores=0-13",
                           "NodeName=gpu01 Name=gpu Type=rtx File=/dev/nvidia[4-7] Cores=14-27"]
    assert "# slurm.conf: NodeName=gpu01 Gres=gpu:rtx:8 Sockets=2 CoresPerSocket=14 ThreadsPerCore=2" in lines


def test_nvlink_box_one_line_per_gpu_with_links():
    t, lay = topo("dgx1-v100-msccl-tools-4xmlx5-old-legend.txt")
    lines = body(gres_conf_lines(t, None, dev_dir="/dev/"))
    assert lines[0] == "Name=gpu File=/dev/nvidia0 Links=-1,1,1,2,2,0,0,0"
    assert lines[7] == "Name=gpu File=/dev/nvidia7 Links=0,0,0,1,2,1,2,-1"


def test_without_cpu_layout_cores_are_left_out_and_said_so():
    t, _ = topo("rtx5090-2gpu-workstation-phb-club3090-1229.txt")
    lines = gres_conf_lines(t)
    assert body(lines) == ["Name=gpu File=/dev/nvidia[0-1]"]
    assert any(ln.startswith("# Cores= left out: no CPU layout") for ln in lines)


def test_interleaved_numa_maps_even_cpus_to_socket0_cores():
    t, lay = topo("princeton-della-pli-h100-8gpu-nv18-6nic-odd-cpu-affinity.txt",
                  "princeton-pli-h100-node-xeon8468-lscpu.txt")
    lines = body(gres_conf_lines(t, lay))
    assert [ln.split()[2] for ln in lines] == ["Cores=0-47"] * 4 + ["Cores=48-95"] * 4


@pytest.mark.parametrize("kw", [{"node_name": "a b"}, {"gpu_type": "h100#x"}, {"node_name": ""}])
def test_values_that_would_break_gres_conf_are_refused(kw):
    t, _ = topo("rtx5090-2gpu-workstation-phb-club3090-1229.txt")
    with pytest.raises(UsageError):
        gres_conf_lines(t, **kw)


def test_wrong_lscpu_for_the_node_is_refused():
    t = parse_topo((FIX / "topo" / "h20-8gpu-nv18-8nic-driver535-sglang-24966.txt").read_text(), path="h20")
    lay = parse_lscpu_p((FIX / "lscpu" / "xeon-x5650-2s-interleaved-numa-lscpu-p.txt").read_text())
    with pytest.raises(UsageError, match="not in the CPU layout") as e:
        gres_conf_lines(t, lay)
    assert e.value.path == "h20" and e.value.line == 2
