"""`slurmkit topo` as a user runs it: captured files, --json, --gres-conf, exit codes; live mode through a fake
nvidia-smi (dev/fakegpu's replay tool with a scenario made here) and the real sysfs of this machine."""
import json
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures"
FAKE = REPO / "dev" / "fakegpu" / "bin" / "nvidia-smi"


def sk(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "slurmkit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def topo_file(name):
    return str(FIX / "topo" / name)


def test_json_is_exactly_the_documented_shape():
    r = sk("topo", "--topo-file", topo_file("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc) == ["gpus", "nics", "interconnect", "warnings"]
    assert all(list(g) == ["index", "cpus", "numa", "links"] for g in doc["gpus"])
    assert doc["gpus"][4]["cpus"] == list(range(48, 96)) + list(range(144, 192))
    assert doc["gpus"][4]["numa"] == [1]
    assert doc["gpus"][4]["links"]["GPU0"] == "NV18" and doc["gpus"][4]["links"]["NIC4"] == "PIX"
    assert doc["nics"][0] == {"name": "NIC0", "device": "mlx5_1"}
    assert doc["interconnect"] == "nvlink" and doc["warnings"] == []


def test_table_names_nearest_nics_and_warnings():
    r = sk("topo", "--topo-file", topo_file("dgx1-v100-msccl-tools-4xmlx5-old-legend.txt"))
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["GPU", "CPUS", "NUMA", "NVLINK", "TO", "GPU", "NEAREST", "NIC"]
    assert lines[1].split() == ["GPU0", "0-19,40-59", "?", "1,2,3,4", "mlx5_0(PIX)"]
    assert "interconnect: partial-nvlink" in r.stdout


def test_lscpu_file_fills_cpu_sets():
    r = sk("topo", "--topo-file", topo_file("nchc-nano4-h100x8-10nic-nv18-srun-cgroup-partial-cpu-affinity-nic-legend.txt"),
           "--lscpu-file", str(FIX / "lscpu" / "princeton-pli-h100-node-xeon8468-lscpu.txt"), "--json")
    # NCHC's capture ran in a 1-CPU cgroup (GPU0-3 empty, GPU4-7 "56"); with a 2 x 48-core interleaved layout
    # (the PLI node class's lscpu, standing in for the NCHC node's, which was not captured) each GPU gets its node
    doc = json.loads(r.stdout)
    assert doc["gpus"][0]["cpus"] == list(range(0, 96, 2))
    assert doc["gpus"][7]["cpus"] == list(range(1, 96, 2))
    assert any("CPU set taken from their NUMA node(s)" in w for w in doc["warnings"])


def test_untrustworthy_capture_exits_2_naming_the_line():
    name = topo_file("dgx-h100-12nic-vllm-13855-paste-merged-columns-gpu-rows.txt")
    r = sk("topo", "--topo-file", name, "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"slurmkit: error: {name}:1: column name 'NIC8NIC9'")
    assert "Traceback" not in r.stderr


def test_bad_lscpu_exits_2_naming_the_line(tmp_path):
    f = tmp_path / "lscpu.txt"
    f.write_text("# CPU,Core,Socket,Node\n0,0,0,0\n1,1,zero,0\n")
    r = sk("topo", "--topo-file", topo_file("rtx5090-2gpu-workstation-phb-club3090-1229.txt"), "--lscpu-file", str(f))
    assert r.returncode == 2 and f"{f}:3: SOCKET field 'zero' is not a number" in r.stderr


def test_usage_errors_exit_2(tmp_path):
    assert sk("topo", "--topo-file", str(tmp_path / "missing.txt")).returncode == 2
    r = sk("topo", "--topo-file", topo_file("rtx5090-2gpu-workstation-phb-club3090-1229.txt"), "--node-name", "n1")
    assert r.returncode == 2 and "--node-name only applies with --gres-conf" in r.stderr


def test_gres_conf_pcie_box_groups_gpus_by_socket():
    r = sk("topo", "--topo-file", topo_file("pcie-8gpu-pix-phb-sys-2socket-nccl-1439-spaces.txt"),
           "--lscpu-file", str(FIX / "lscpu" / "xeon-x5650-2s-interleaved-numa-lscpu-p.txt"), "--gres-conf")
    # the x5650 lscpu has only 12 CPUs: CPUs 12-55 from this matrix are not in it -> refused, not a wrong Cores=
    assert r.returncode == 2 and "CPUs 12-13,28-41 from the matrix are not in the CPU layout" in r.stderr


def _scenario(tmp_path, line):
    d = tmp_path / "scen"
    d.mkdir()
    (d / "topo.txt").write_bytes((FIX / "topo" / "h20-8gpu-nv18-8nic-driver535-sglang-24966.txt").read_bytes())
    (d / "responses").write_text(line + "\n")
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"tools:\n  nvidia_smi: {FAKE}\ntopology:\n  timeout: 2\n")
    env = dict(__import__("os").environ, SLURMKIT_FAKEGPU_SCENARIO=str(d), SLURMKIT_CONFIG=str(cfg))
    return env


def test_live_mode_runs_the_configured_nvidia_smi(tmp_path):
    env = _scenario(tmp_path, "nvidia-smi\ttopo -m\ttopo.txt")
    r = sk("topo", "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["gpus"]) == 8 and doc["nics"][7] == {"name": "NIC7", "device": "mlx5_8"}


def test_live_mode_hanging_nvidia_smi_times_out_exit_1(tmp_path):
    env = _scenario(tmp_path, "nvidia-smi\ttopo -m\t@hang")
    r = sk("topo", env=env, timeout=30)
    assert r.returncode == 1
    assert "cannot read the GPU topology" in r.stderr and "timed out after 2s" in r.stderr


def test_live_mode_missing_nvidia_smi_exit_1(tmp_path):
    cfg = tmp_path / "site.yaml"
    cfg.write_text("tools:\n  nvidia_smi: /nonexistent/nvidia-smi\n")
    r = sk("--config", str(cfg), "topo")
    assert r.returncode == 1 and "command not found" in r.stderr


def test_live_mode_fills_missing_numa_from_pci_sysfs(tmp_path):
    # DGX-1 V100 capture has no NUMA Affinity column; the fake nvidia-smi also answers the bus-id query and a
    # SYNTHETIC sysfs tree gives each GPU's numa_node
    d = tmp_path / "scen"
    d.mkdir()
    (d / "topo.txt").write_bytes((FIX / "topo" / "dgx1-v100-msccl-tools-4xmlx5-old-legend.txt").read_bytes())
    bus = [f"00000000:{0x10 + i:02X}:00.0" for i in range(8)]
    (d / "ids.csv").write_text("".join(f"{i}, {b}\n" for i, b in enumerate(bus)))
    (d / "responses").write_text("nvidia-smi\ttopo -m\ttopo.txt\nnvidia-smi\t--query-gpu=index,pci.bus_id*\tids.csv\n")
    root = tmp_path / "root"
    for i, b in enumerate(bus):
        p = root / "sys" / "bus" / "pci" / "devices" / f"0000:{0x10 + i:02x}:00.0"
        p.mkdir(parents=True)
        (p / "numa_node").write_text("0\n" if i < 4 else "1\n")
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"tools:\n  nvidia_smi: {FAKE}\ntopology:\n  sysfs_root: {root}\n")
    env = dict(__import__("os").environ, SLURMKIT_FAKEGPU_SCENARIO=str(d), SLURMKIT_CONFIG=str(cfg))
    r = sk("topo", "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [g["numa"] for g in doc["gpus"]] == [[0]] * 4 + [[1]] * 4
    assert any("NUMA node read from /sys/bus/pci/devices" in w for w in doc["warnings"])
    assert not any("no NUMA Affinity" in w for w in doc["warnings"])
