"""The straggler node (issue 34) on the real dev cluster: a 2-node job on two nodes running NVIDIA's real
nvidia-smi 535 over the mock NVML (scenario nvml-h100), one node's GPUs held at 382 MHz under HW Power Brake
Slowdown through nvml-mock-ctl (what the mock can show of a slow node: its clocks and reasons, the same
utilisation), is reported by `slurmkit efficiency JOBID` with that node named and its cause; with
`efficiency.straggler_drain_after: 1` its own `straggler` check (epilog, else the health program) logs the lag with
its cause and drains it `slurmkit:straggler`, which `audit` explains and `audit resume` leaves to a human."""
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAST, SLOW = "n2", "n3"



def nvml(c, node, *args):
    r = c.run(sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(c.dir), "nvml", node, *args,
              check=False, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def drain_after_one(clean):
    """`efficiency.straggler_drain_after: 1` in the cluster's site config (the hooks' next run reads it); undone."""
    conf = clean.site_config
    original = conf.read_text()
    tmp = conf.with_name(".slurmkit.yaml.straggler")
    tmp.write_text(re.sub(r"(?m)^(efficiency:.*\n)", r"\1  straggler_drain_after: 1\n", original, count=1))
    os.replace(tmp, conf)
    try:
        yield clean
    finally:
        tmp.write_text(original)
        os.replace(tmp, conf)


@pytest.fixture
def mock_nodes(drain_after_one):
    clean = drain_after_one
    sys.path.insert(0, str(REPO / "dev"))
    import fakenvml
    missing = fakenvml.ready(clean.dir)
    if missing:
        pytest.fail(f"the mock NVML rig is not set up: {missing}")
    for n in (FAST, SLOW):
        clean.set_scenario(n, "nvml-h100")
    yield clean


@pytest.mark.compat("dev cluster")  # the epilog's node list differs by version (SLURM_NODELIST, SLURM_JOB_NODELIST)
def test_a_node_under_the_power_brake_is_named_the_straggler_of_its_job(mock_nodes, tmp_path):
    c = mock_nodes
    for n in (FAST, SLOW):
        nvml(c, n, "util", "--gpu", "all", "97")        # both nodes busy, as a synchronous job's are
        nvml(c, n, "power", "--gpu", "all", "640")
        nvml(c, n, "clocks", "--gpu", "all", "1980")
    started = tmp_path / "started"
    jid = c.sbatch("", "-N", "2", "-w", f"{FAST},{SLOW}", "--gres=gpu:8", "-o", "/dev/null", "--wrap",
                   f"touch {started}; sleep 12")
    # the node slows DURING the job: set before it, the prolog's clocks check drains it and the job goes elsewhere
    # (PrologFlags=Alloc: the script runs once every node's prolog has passed)
    deadline = time.monotonic() + 90
    while not started.exists():
        assert time.monotonic() < deadline, f"job {jid} did not start on {FAST},{SLOW}: {c.job_state(jid)}"
        time.sleep(0.2)
    nvml(c, SLOW, "clocks", "--gpu", "all", "382")
    nvml(c, SLOW, "throttle", "--gpu", "all", "hw_power_brake_slowdown")
    c.wait_job(jid, timeout=90)
    deadline = time.monotonic() + 60   # each node's epilog appends its record
    while True:
        r = c.slurmkit("efficiency", str(jid), "--json")
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        if doc.get("job", {}).get("node", "").count(",") == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(doc["job"]["node"].split(",")) == [FAST, SLOW], (r.stdout, r.stderr)
    assert [x["node"] for x in doc["stragglers"]] == [SLOW], doc["stragglers"]
    x = doc["stragglers"][0]
    assert x["lags"][0]["measure"] == "SM clock" and x["lags"][0]["value"] == 382, x
    assert x["cause"].startswith("HW Power Brake Slowdown on GPU 0-7"), x
    text = c.slurmkit("efficiency", str(jid)).stdout
    assert f"straggler {SLOW}: SM clock 382 MHz vs 1980 MHz" in text, text

    # the node's own verdict: its epilog judged it if FAST's record was in by then, else its health program does
    from slurmkit import config, healthlog
    settings = config.load(str(c.site_config))

    def verdict(node):
        recs = [r for r in healthlog.read(settings.paths.health_log, node=node)
                if r.get("check") == "straggler" and r["status"] != "skip"]
        return recs[-1] if recs else None

    deadline = time.monotonic() + 30
    while verdict(SLOW) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if verdict(SLOW) is None:  # what HealthCheckProgram runs on SLOW next (its straggler check), run here
        from slurmkit.hooks.common import run_hook
        run_hook("health", settings, {"SLURMD_NODENAME": SLOW}, checks=["straggler"], job_gpus=None)
    v = verdict(SLOW)
    assert v is not None and v["status"] == "fail", v
    assert v["reason"].startswith(f"lagged its jobs' other nodes in 1 job in 24h (limit 1); job {jid}: SM clock 382"), v
    assert "likely cause: HW Power Brake Slowdown on GPU 0-7" in v["reason"], v
    assert v["action"] == "drained", v
    assert (verdict(FAST) or {}).get("status") in (None, "ok"), verdict(FAST)
    n = c.node(SLOW)
    assert n.drained and n.reason.startswith("slurmkit:straggler lagged its jobs' other nodes"), n.to_dict()
    assert not c.node(FAST).drained, c.node(FAST).to_dict()
    audit = json.loads(c.slurmkit("audit", "--json").stdout)
    entry = next(x for x in audit["nodes"] if x["node"] == SLOW)
    assert entry["cause"] == "straggler" and entry["check"] == "straggler", entry
    r = c.slurmkit("audit", "resume", SLOW, "--recheck")
    assert r.returncode != 0 and "audit resume NODE --force" in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert c.node(SLOW).drained
