"""The straggler node (issue 34) on the real dev cluster: a 2-node job on two nodes running NVIDIA's real
nvidia-smi 535 over the mock NVML (scenario nvml-h100), one node's GPUs held at 382 MHz under HW Power Brake
Slowdown through nvml-mock-ctl (what the mock can show of a slow node: its clocks and reasons, the same
utilisation), is reported by `slurmkit efficiency JOBID` with that node named and its cause."""
import json
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
def mock_nodes(clean):
    sys.path.insert(0, str(REPO / "dev"))
    import fakenvml
    missing = fakenvml.ready(clean.dir)
    if missing:
        pytest.fail(f"the mock NVML rig is not set up: {missing}")
    for n in (FAST, SLOW):
        clean.set_scenario(n, "nvml-h100")
    yield clean


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
