"""Issue 28, item 2, on the real dev cluster: a node whose nvidia-smi exits 0 with garbage, or with nothing, is
drained by the prolog with a reason a human can act on, and the job never runs there (SYNTHETIC scenarios
dev/fakegpu/scenarios/nvsmi-garbage and nvsmi-empty). Before, every GPU check said `skip` and the job ran."""
import json

import pytest

from test_health import health_log, log_mark

pytestmark = pytest.mark.compat("prolog drain")


@pytest.mark.parametrize("scenario, why", [
    ("nvsmi-garbage", "no GPU section in "),
    ("nvsmi-empty", "it printed nothing"),
])
def test_unreadable_nvidia_smi_exit_0_drains_the_node_and_the_job_never_runs_there(clean, tmp_path, scenario, why):
    c = clean
    c.set_scenario("n3", scenario)
    out = tmp_path / "job.out"
    mark = log_mark(c)
    jid = c.sbatch("#!/bin/sh\necho ran\n", "-w", "n3", "--gres=gpu:1", "-o", str(out))
    n3 = c.wait_node("n3", lambda x: x.drained, timeout=90)
    assert n3.reason.startswith("slurmkit:gpu_count nvidia-smi -q output unreadable: " + why), n3.reason
    recs = health_log(c, since=mark, node="n3", context="prolog", job_id=jid)
    by = {r["check"]: r for r in recs}
    for check in ("gpu_count", "ecc", "recovery", "driver", "pcie", "gpu_procs"):   # every check that reads -q
        assert by[check]["status"] == "fail", by[check]
    assert by["xid"]["status"] == "ok"
    # the admin's own look says the same, and exits 1 (unhealthy), not 0 with a row of skips
    chk = c.slurmkit("check", "--json", "--node", "n3", env=dict(c.env, SLURMKIT_FAKE_NODE="n3"))
    res = {r["check"]: r for r in json.loads(chk.stdout)["results"]}
    assert chk.returncode == 1, chk.stdout + chk.stderr
    if scenario == "nvsmi-garbage":   # an empty `nvlink -s` is what a GPU without NVLink gets: the -q checks fail
        assert res["nvlink"]["status"] == "fail" and "nvidia-smi nvlink -s output unreadable" in res["nvlink"]["reason"]
    c.run("scancel", str(jid), check=False)
    assert not out.exists()
