"""GPU faults injected mid-job through NVIDIA's mock NVML (issue 32, the test rig): the node runs NVIDIA's real
nvidia-smi 535 over the mock (scenario nvml-h100, dev/fakenvml.py), `dev/cluster.py nvml NODE ...` runs
nvml-mock-ctl on that node's overrides file, and what slurmkit does is read back from the real scontrol/sinfo."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

NODE = "n2"


def nvml(c, *args):
    r = c.run(sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(c.dir), "nvml", NODE, *args,
              check=False, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture
def mock_node(clean):
    sys.path.insert(0, str(REPO / "dev"))
    import fakenvml
    missing = fakenvml.ready(clean.dir)
    if missing:
        pytest.fail(f"the mock NVML rig is not set up: {missing}")
    clean.set_scenario(NODE, "nvml-h100")
    yield clean


def live_check(c, *only):
    """`slurmkit check --json` as the node runs it (the recheck's environment: the node's fake tools)."""
    env = dict(c.env, SLURMKIT_FAKE_NODE=NODE)
    r = c.slurmkit("check", "--json", "--node", NODE, *[a for o in only for a in ("--only", o)], env=env)
    doc = json.loads(r.stdout)
    return r.returncode, {x["check"]: x for x in doc["results"]}


@pytest.mark.compat("health")
def test_ecc_failure_mid_job_drains_in_the_epilog_and_resumes_once_cleared(mock_node, tmp_path):
    c = mock_node
    flag, ready = tmp_path / "go", tmp_path / "read"
    out = tmp_path / "job.out"
    tmp_path.chmod(0o777)
    nvsmi = REPO / "dev" / "fakegpu" / "bin" / "nvidia-smi"
    q = f"{nvsmi} --query-gpu=index,ecc.errors.uncorrected.volatile.total --format=csv,noheader"
    # the job reads its GPUs (the node's real nvidia-smi, in slurmd's job environment), says so, waits for the
    # fault, reads again. RUNNING alone is not "read": Slurm reports it before the script's first line has run
    job = f"#!/bin/sh\n{q}\ntouch {ready}\nwhile [ ! -e {flag} ]; do sleep 0.1; done\n{q}\n"
    jid = c.sbatch(job, "-w", NODE, "-o", str(out))
    c.wait_job(jid, states=("RUNNING",), timeout=30, interval=0.1)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline, f"job {jid} did not read its GPUs within 30 s: {c.job_state(jid)}"
        time.sleep(0.1)
    assert live_check(c, "ecc")[1]["ecc"]["status"] == "ok"
    nvml(c, "fail", "--gpu", "1", "--mode", "ecc_uncorrectable", "--xid", "48")
    flag.touch()
    c.wait_job(jid, states=("COMPLETED",), timeout=30)
    lines = out.read_text().splitlines()
    assert lines[:8] == [f"{i}, 0" for i in range(8)], lines       # before: the profile's healthy counters
    after = dict(x.split(", ") for x in lines[8:16])
    assert int(after["1"]) > 0 and all(after[str(i)] == "0" for i in range(8) if i != 1), lines
    rec = c.wait_node(NODE, lambda r: r.drained and r.reason.startswith("slurmkit:ecc"), timeout=60)
    sinfo = c.run("sinfo", "-h", "-n", NODE, "-o", "%T|%E").stdout.strip()
    assert sinfo.split("|")[0].startswith("drain") and sinfo.split("|")[1] == rec.reason, sinfo

    r = c.slurmkit("audit", "resume", NODE, "--recheck")
    assert r.returncode == 1 and f"{NODE}: refuse:" in r.stdout, r.stdout + r.stderr
    assert c.node(NODE).drained

    nvml(c, "reset", "--gpu", "all")        # the GPU replaced: the profile's healthy counters again
    r = c.slurmkit("audit", "resume", NODE, "--recheck")
    assert f"{NODE}: resumed: check ecc passed" in r.stdout, r.stdout + r.stderr
    c.wait_node(NODE, lambda r: not r.drained)


@pytest.mark.compat("health")
def test_row_remap_failure_on_an_idle_node_is_drained_by_the_health_program(mock_node):
    """Between jobs: the health program as slurmd runs it (no PATH, only SLURMD_NODENAME and SLURM_CONF) sees
    the growing uncorrectable ECC and row-remap failure nvml-mock-ctl injected, and drains the node."""
    c = mock_node
    nvml(c, "fail", "--gpu", "6", "--mode", "ecc_uncorrectable")
    r = subprocess.run([str(c.dir / "hooks" / "health")], capture_output=True, text=True, timeout=60,
                       env={"SLURMD_NODENAME": NODE, "SLURM_CONF": str(c.conf)})
    rec = c.wait_node(NODE, lambda r: r.drained, timeout=30)
    assert rec.reason.startswith("slurmkit:ecc") and "row remapping failure" in rec.reason, (rec, r.stderr)
    nvml(c, "reset", "--gpu", "6")
    r = c.slurmkit("audit", "resume", NODE, "--recheck")
    assert f"{NODE}: resumed: check ecc passed" in r.stdout, r.stdout + r.stderr
    c.wait_node(NODE, lambda r: not r.drained)


@pytest.mark.compat("health")
def test_throttled_gpu_shows_in_the_live_check(mock_node):
    c = mock_node
    nvml(c, "throttle", "--gpu", "5", "hw_slowdown", "hw_thermal_slowdown")
    env = dict(c.env, SLURMKIT_FAKE_NODE=NODE)
    q = c.run(str(REPO / "dev" / "fakegpu" / "bin" / "nvidia-smi"), "-q", "-d", "PERFORMANCE", "-i", "5",
              env=env).stdout
    assert "HW Slowdown                       : Active" in q and "HW Thermal Slowdown           : Active" in q, q
    rc, res = live_check(c)
    # the clocks check fails naming the throttled GPU and its reasons; nothing else fails
    assert rc == 1 and res["clocks"]["status"] == "fail" and "HW Slowdown" in res["clocks"]["reason"], res["clocks"]
    assert all(x["status"] in ("ok", "skip") for k, x in res.items() if k != "clocks"), res
    nvml(c, "throttle", "--gpu", "5", "none")
    q = c.run(str(REPO / "dev" / "fakegpu" / "bin" / "nvidia-smi"), "-q", "-d", "PERFORMANCE", "-i", "5",
              env=env).stdout
    deadline = time.monotonic() + 10   # the mock re-reads its overrides file on a short TTL
    while "HW Slowdown                       : Active" in q and time.monotonic() < deadline:
        time.sleep(0.2)
        q = c.run(str(REPO / "dev" / "fakegpu" / "bin" / "nvidia-smi"), "-q", "-d", "PERFORMANCE", "-i", "5",
                  env=env).stdout
    assert "HW Slowdown                       : Not Active" in q, q


def test_gpu_fallen_off_the_bus_fails_the_live_check(mock_node):
    """The real nvidia-smi still lists a GPU that fell off the bus, its fields reading "GPU is lost": gpu_count
    does not count it as visible."""
    c = mock_node
    nvml(c, "fail", "--gpu", "3", "--mode", "fallen_off_bus")
    rc, res = live_check(c)
    assert rc == 1 and res["gpu_count"]["status"] == "fail", res
    assert "00000000:4B:00.0 is lost" in res["gpu_count"]["reason"], res["gpu_count"]


@pytest.fixture
def nvml_prolog(mock_node, tmp_path):
    """NODE's prolog reads NVML in process (health.gpu_source: nvml): a per-node hook beside the cluster's wrapper
    gives it what a real node has, the driver's library where the loader finds it (here the mock's, with NODE's
    state file), and runs the repo's prolog in its own process (a hook agent started without the library could not
    load it)."""
    import yaml

    c = mock_node
    cfg = yaml.safe_load(c.site_config.read_text())
    cfg.setdefault("health", {})["gpu_source"] = "nvml"
    own = tmp_path / "nvml.yaml"
    own.write_text(yaml.safe_dump(cfg))
    m = c.dir / "fakegpu" / "nvml"
    hook = c.dir / "hooks" / f"prolog.{NODE}"
    hook.write_text(
        "#!/bin/sh\n"
        f"SLURMKIT_CONFIG={own}\nSLURMKIT_AGENT_SOCKET=none\nLD_LIBRARY_PATH={m}/lib\n"
        f"MOCK_NVML_CONFIG={m}/configs/mock-nvml-config-h100.yaml\nMOCK_NVML_OVERRIDES={m}/nodes/{NODE}.yaml\n"
        "export SLURMKIT_CONFIG SLURMKIT_AGENT_SOCKET LD_LIBRARY_PATH MOCK_NVML_CONFIG MOCK_NVML_OVERRIDES\n"
        f"exec {REPO}/prolog/prolog \"$@\"\n")
    hook.chmod(0o755)
    yield c, cfg
    hook.unlink(missing_ok=True)


def prolog_records(cfg, job_id):
    from slurmkit import healthlog

    return [r for r in healthlog.read(cfg["paths"]["health_log"], node=NODE)
            if r.get("context") == "prolog" and r.get("job_id") == job_id]


@pytest.mark.compat("health")
def test_the_prolog_reads_nvml_and_drains_a_gpu_failed_through_the_mock(nvml_prolog):
    pytest.importorskip("pynvml")
    c, cfg = nvml_prolog
    jid = c.sbatch("#!/bin/sh\ntrue\n", "-w", NODE, "--gres=gpu:1", "-o", "/dev/null")
    c.wait_job(jid, timeout=60)
    recs = {r["check"]: r for r in prolog_records(cfg, jid)}
    # every check that reads the GPUs read NVML, and the fabric (which 535's nvidia-smi cannot print) is live
    assert recs["gpu_count"]["gpu_source"] == {"source": "nvml"} and recs["gpu_count"]["status"] == "ok", recs
    assert recs["fabric"]["status"] == "ok" and recs["fabric"]["gpu_source"] == {"source": "nvml"}, recs["fabric"]
    assert "gpu_source" not in recs["xid"]      # the kernel log is not the GPUs' -q

    nvml(c, "fail", "--gpu", "3", "--mode", "fallen_off_bus")
    jid = c.sbatch("#!/bin/sh\ntrue\n", "-w", NODE, "--gres=gpu:1", "-o", "/dev/null")
    rec = c.wait_node(NODE, lambda r: r.drained and r.reason.startswith("slurmkit:gpu_count"), timeout=60)
    assert "GPU 00000000:4B:00.0 is lost" in rec.reason, rec
    failed = {r["check"]: r for r in prolog_records(cfg, jid)}
    assert failed["gpu_count"]["status"] == "fail" and failed["gpu_count"]["gpu_source"] == {"source": "nvml"}
    assert failed["gpu_count"]["action"] not in (None, "none"), failed["gpu_count"]
