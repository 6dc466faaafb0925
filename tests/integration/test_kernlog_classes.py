"""Each GPU-failure class the kernel logs without an `Xid` line drains a dev-cluster node through the real prolog
(real Slurm 22.05, fake GPU tools replaying the scenario's kernel log: dev/fakegpu/scenarios/<class>)."""
import pytest

from test_health import health_log, log_mark

# scenario -> the drain reason's start (what `sinfo -R` and an admin see), and a word of what to do
CLASSES = {
    "offbus-noxid": ("slurmkit:xid79 GPU 0000:5d:00 fell off the bus", "reboot"),
    "gpulost": ("slurmkit:xid_gpulost GPU 0000:3b:00 is lost to the driver", "reboot"),
    "rminit": ("slurmkit:xid_rminit GPU 0000:09:00 could not be initialised", "reboot"),
    "gsp": ("slurmkit:xid_gsp GPU (not named in the log) could not boot its GSP firmware", "reboot"),
    "aer": ("slurmkit:xid_aer GPU 0000:02:00 had a fatal PCIe error", "reboot"),
    "xid154": ("slurmkit:xid154 GPU 0000:18:00 needs a GPU reset (cause: Xid 48)", "reset the GPU"),
}


@pytest.mark.parametrize("scenario", sorted(CLASSES))
def test_the_prolog_drains_a_node_that_logs(clean, scenario):
    cluster = clean
    start, todo = CLASSES[scenario]
    cluster.set_scenario("n2", scenario)
    mark = log_mark(cluster)
    jid = cluster.sbatch("#!/bin/sh\ntrue\n", "-w", "n2", "--gres=gpu:1", "-o", "/dev/null")
    n2 = cluster.wait_node("n2", lambda r: r.drained, timeout=90)
    assert n2.reason.startswith(start), n2.reason
    assert todo in n2.reason
    recs = health_log(cluster, since=mark, node="n2", context="prolog", job_id=jid, status="fail")
    assert len(recs) == 1 and recs[0]["check"] == "xid" and recs[0]["action"] == "drained"
    assert recs[0]["evidence"]["line"]                      # the log line that failed, verbatim
    cluster.run("scancel", str(jid), check=False)
