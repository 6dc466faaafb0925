"""A REAL slurmd loads the gres.conf `slurmkit topo --gres-conf` generates from a fixture topology, and Slurm binds
the GPUs to the right sockets.

Each case starts a one-node cluster of its own (dev/cluster.py, its own dir and port next to the session
cluster's) whose CPU layout matches the fixture's machine: --sockets/--cores-per-socket/--threads-per-core.
- princeton PLI H100 node: real `nvidia-smi topo -m` + the real `lscpu` of that node class (interleaved NUMA:
  node0 = even CPUs, which Slurm numbers as cores 0-47).
- H20 HGX node: real `nvidia-smi topo -m` + a SYNTHETIC `lscpu -p` (2 x 48 cores, SMT2, siblings at cpu+96, the
  layout its CPU Affinity column 0-47,96-143 / 48-95,144-191 implies); no lscpu was captured for it.
- DGX-1 V100: real matrix (hybrid cube-mesh NV1/NV2, so Links= mixes 2, 1 and 0) + SYNTHETIC `lscpu -p`
  (2 x 20 cores, SMT2, from its affinity 0-19,40-59 / 20-39,60-79).
Control: the naive gres.conf (nvidia-smi's CPU Affinity pasted into Cores=) is rejected by the same slurmd with
"invalid GRES core specification", so this test can tell a right file from a wrong one.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
BASE = Path(os.environ.get("SLURMKIT_DEV_DIR", "/tmp/slurmkit-test") + "-topo")
PORT = int(os.environ.get("SLURMKIT_DEV_PORT", "6917")) + 5


def synthetic_lscpu_p(cores_per_socket: int, what: str) -> str:
    """SYNTHETIC `lscpu -p`: 2 sockets x N cores x 2 threads, siblings at cpu + 2N (the layout an affinity column
    like 0-47,96-143 / 48-95,144-191 implies)."""
    n = 2 * cores_per_socket
    rows = [f"# synthetic: 2 sockets x {cores_per_socket} cores x 2 threads, siblings at cpu+{n} ({what})",
            "# CPU,Core,Socket,Node"]
    rows += [f"{c},{c % n},{(c % n) // cores_per_socket},{(c % n) // cores_per_socket}" for c in range(2 * n)]
    return "\n".join(rows) + "\n"


def synthetic_h20_lscpu_p() -> str:
    return synthetic_lscpu_p(48, "H20 HGX host class")


@contextmanager
def one_node_cluster(name, gres_conf: Path, sockets, cores, threads):
    d = BASE / name
    py = sys.executable
    subprocess.run([py, str(REPO / "dev/cluster.py"), "--dir", str(d), "down"], capture_output=True, timeout=60)
    shutil.rmtree(d / "log", ignore_errors=True)  # logs append across runs: start clean so the checks see only ours
    up = subprocess.run([py, str(REPO / "dev/cluster.py"), "--dir", str(d), "up", "--port", str(PORT),
                         "--nodes", "1", "--sockets", str(sockets), "--cores-per-socket", str(cores),
                         "--threads-per-core", str(threads), "--gres-conf", str(gres_conf), "--hooks", "true",
                         "--timeout", "40"], capture_output=True, text=True, timeout=120)
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
    try:
        assert up.returncode == 0, up.stderr
        yield d, env
    finally:
        subprocess.run(["scancel", "--full", "-p", "gpu"], env=env, capture_output=True, timeout=30)
        subprocess.run([py, str(REPO / "dev/cluster.py"), "--dir", str(d), "down"], capture_output=True, timeout=60)


def gres_from_fixture(cluster, tmp_path, topo, lscpu_file, devdir):
    out = cluster.slurmkit("topo", "--topo-file", str(FIX / "topo" / topo), "--lscpu-file", str(lscpu_file),
                           "--gres-conf", "--node-name", "n1", "--dev-dir", str(devdir))
    assert out.returncode == 0, out.stderr
    f = tmp_path / "gres.conf"
    f.write_text(out.stdout)
    return f, out.stdout


def show_node(env):
    return subprocess.run(["scontrol", "show", "node", "n1"], env=env, capture_output=True, text=True,
                          timeout=30, check=True).stdout


def job_alloc(env, job_id, timeout=40.0):
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = subprocess.run(["scontrol", "-d", "show", "job", str(job_id)], env=env, capture_output=True,
                              text=True, timeout=30).stdout
        m = re.search(r"CPU_IDs=(\S+) .*GRES=gpu:4\(IDX:(\S+)\)", text)
        if "JobState=RUNNING" in text and m:
            return m.group(1), m.group(2)
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} never ran with 4 GPUs: {text}")


def first_cpu(ids: str) -> int:
    return int(re.match(r"\d+", ids).group())


CASES = [
    # fixture, CPU layout file (None = synthetic H20), sockets, cores/socket, threads, expected Cores= per GPU
    ("princeton-della-pli-h100-8gpu-nv18-6nic-odd-cpu-affinity.txt", "princeton-pli-h100-node-xeon8468-lscpu.txt",
     2, 48, 1, ["0-47"] * 4 + ["48-95"] * 4),
    ("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt", None, 2, 48, 2, ["0-47"] * 4 + ["48-95"] * 4),
    # DGX-1 V100, hybrid cube-mesh: Links= mixes 2, 1 and 0 (no NVLink) per pair
    ("dgx1-v100-msccl-tools-4xmlx5-old-legend.txt", 20, 2, 20, 2, ["0-19"] * 4 + ["20-39"] * 4),
]
LINKS0 = {"princeton": "-1,18,18,18,18,18,18,18", "h20": "-1,18,18,18,18,18,18,18", "dgx1": "-1,1,1,2,2,0,0,0"}


@pytest.mark.integration
@pytest.mark.parametrize("topo,lscpu,sockets,cores,threads,expect", CASES,
                         ids=["princeton-lscpu", "h20-synthetic", "dgx1-synthetic"])
def test_real_slurmd_loads_generated_gres_conf_and_binds_gpus_to_sockets(cluster, tmp_path, topo, lscpu, sockets,
                                                                         cores, threads, expect):
    name = topo.split("-")[0]
    devdir = BASE / name / "dev"
    if not isinstance(lscpu, str):
        lscpu_file = tmp_path / f"synthetic-{name}-lscpu-p.txt"
        lscpu_file.write_text(synthetic_h20_lscpu_p() if lscpu is None else synthetic_lscpu_p(lscpu, name))
    else:
        lscpu_file = FIX / "lscpu" / lscpu
    gres, text = gres_from_fixture(cluster, tmp_path, topo, lscpu_file, devdir)
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert [re.search(r"Cores=(\S+)", ln).group(1) for ln in lines] == expect
    assert all(f"File={devdir}/nvidia{i} " in ln for i, ln in enumerate(lines))
    assert lines[0].endswith("Links=" + LINKS0[name])

    with one_node_cluster(name, gres, sockets, cores, threads) as (d, env):
        node = show_node(env)
        assert re.search(r"^\s*Gres=gpu:8\(S:0-1\)\s*$", node, re.M), node
        assert "State=IDLE" in node
        logs = (d / "log" / "slurmctld.log").read_text() + (d / "log" / "slurmd-n1.log").read_text()
        assert "invalid GRES" not in logs and "Invalid GRES" not in logs
        # with enforce-binding a 1-CPU job gets GPUs only with a CPU those GPUs' Cores= allow: the first job takes
        # GPUs 0-3 and a socket-0 CPU, the second can only get GPUs 4-7 and must run on socket 1
        cpus_per_socket = cores * threads
        jobs = []
        for _ in range(2):
            r = subprocess.run(["sbatch", "--parsable", "-n1", "--gres=gpu:4", "--gres-flags=enforce-binding",
                                "-o", "/dev/null", "--wrap", "sleep 60"], env=env, capture_output=True, text=True,
                               timeout=30, check=True)
            jobs.append(int(r.stdout.strip().split(";")[0]))
        (c1, g1), (c2, g2) = job_alloc(env, jobs[0]), job_alloc(env, jobs[1])
        assert g1 == "0-3" and first_cpu(c1) < cpus_per_socket, (c1, g1)
        assert g2 == "4-7" and first_cpu(c2) >= cpus_per_socket, (c2, g2)


@pytest.mark.integration
def test_control_naive_gres_conf_with_os_cpu_ids_is_rejected_by_slurmd(cluster, tmp_path):
    """The trap the generator avoids: nvidia-smi's CPU Affinity (OS ids, SMT siblings) pasted into Cores=."""
    devdir = BASE / "naive" / "dev"
    lscpu_file = tmp_path / "synthetic-h20-lscpu-p.txt"
    lscpu_file.write_text(synthetic_h20_lscpu_p())
    gres, text = gres_from_fixture(cluster, tmp_path, "h20-8gpu-nv18-8nic-driver535-sglang-24966.txt", lscpu_file,
                                   devdir)
    naive = re.sub(r"Cores=0-47 ", "Cores=0-47,96-143 ", text)
    naive = re.sub(r"Cores=48-95 ", "Cores=48-95,144-191 ", naive)
    assert naive != text
    gres.write_text(naive)
    with one_node_cluster("naive", gres, 2, 48, 2) as (d, env):
        node = show_node(env)
        assert "(S:" not in node  # no socket binding survived
        deadline = time.monotonic() + 20
        log = ""
        while time.monotonic() < deadline and "invalid GRES core specification" not in log:
            log = (d / "log" / "slurmctld.log").read_text()
            time.sleep(0.5)
        assert "invalid GRES core specification (0-47,96-143) on node n1" in log
