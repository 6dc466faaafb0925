"""Heavy checks as Slurm jobs on the real dev cluster: `slurmkit health --sweep` submits one exclusive,
low-priority job per node; a node whose replayed DCGM diagnostic fails is drained with the check's reason, the
others keep running jobs, and every verdict lands in the health log and the cache the prolog reads."""
import json
import time
from pathlib import Path

import pytest

from slurmkit import config, healthlog

pytestmark = pytest.mark.integration


def jobs_done(c, ids, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [c.job_state(j) for j in ids]
        if all(s in ("COMPLETED", "FAILED") for s in states):
            return states
        time.sleep(0.5)
    raise AssertionError(f"sweep jobs {ids} not done: {[c.job_state(j) for j in ids]}")


@pytest.fixture
def swept(clean):
    """The heavy-check verdicts a sweep caches outlive it by design (the prolog trusts them for ttl_seconds):
    remove them, or a later test's prolog on n3 would fail on this test's DCGM verdict."""
    yield clean
    state = config.load(str(clean.site_config)).paths.state_dir
    for p in Path(state).glob("dcgm-*.json"):
        p.unlink()


def test_a_sweep_drains_the_node_whose_dcgm_diagnostic_fails(swept):
    c = swept
    c.set_scenario("n3", "dcgm-fail")
    dry = c.slurmkit("health", "--sweep", "gpu", "--checks", "dcgm", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert [j["node"] for j in doc["jobs"]] == ["n1", "n2", "n3", "n4"] and all(j["job_id"] is None
                                                                               for j in doc["jobs"])
    assert "#SBATCH --exclusive" in doc["jobs"][0]["script"] and "#SBATCH --nice=10000" in doc["jobs"][0]["script"]
    r = c.slurmkit("health", "--sweep", "gpu", "--checks", "dcgm", "--json")
    assert r.returncode == 0, r.stderr
    ids = [j["job_id"] for j in json.loads(r.stdout)["jobs"]]
    states = jobs_done(c, ids)
    assert states == ["COMPLETED", "COMPLETED", "FAILED", "COMPLETED"]
    n3 = c.node("n3")
    assert n3.drained and n3.reason.startswith("slurmkit:dcgm dcgmi diag GPU Memory failed on every GPU")
    assert not any(c.node(n).drained for n in ("n1", "n2", "n4"))
    s = config.load(str(c.site_config))
    recs = [x for x in healthlog.read(s.paths.health_log, nodes=["n1", "n3"]) if x.get("context") == "sweep"
            and x.get("job_id") in ids]
    by = {x["node"]: x for x in recs}
    assert by["n3"]["status"] == "fail" and by["n3"]["action"] == "drained"
    assert by["n1"]["status"] == "ok"
    # what the prolog reads: the cached verdict, fresh
    chk = c.slurmkit("check", "--json", "--node", "n1", "--profile", "prolog", env=dict(c.env, SLURMKIT_FAKE_NODE="n1"))
    (d,) = [x for x in json.loads(chk.stdout)["results"] if x["check"] == "dcgm"]
    assert d["status"] == "ok" and d["reason"].startswith("cached: dcgmi diag")


def test_a_sweep_leaves_drained_nodes_out_and_says_how_to_recheck_them(clean):
    c = clean
    c.run("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=slurmkit:dcgm earlier failure")
    r = c.slurmkit("health", "--sweep", "n[1-2]", "--checks", "dcgm", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert [j["node"] for j in doc["jobs"]] == ["n1"]
    assert doc["not_swept"][0]["node"] == "n2" and "audit resume --recheck n2" in doc["not_swept"][0]["why"]
    bad = c.slurmkit("health", "--sweep", "n[9]")
    assert bad.returncode == 2 and "no such node: n9" in bad.stderr
