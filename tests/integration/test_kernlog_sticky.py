"""Issue 28 item 1 on the real dev cluster: a fatal kernel-log fault stays active for the rest of its boot. n2 replays
the real Xid 79 capture (dev/fakegpu/scenarios/xid79); its prolog drains it and moves the Xid mark; then the drain
is lost the way an admin loses it outside slurmkit (`scontrol update State=RESUME`, as after slurmctld died before
it saved state). The next job's prolog on n2 fails again and re-drains it, even once the kernel log no longer
shows the Xid (the ring buffer moved on); a new boot id (the dev cluster's fake one, xid.boot_id_file) ends it.
Whether slurmd runs the hooks in their own process or through the hook agent. And `slurmkit audit resume
--recheck`, the admin's way back, still works: it refuses while this boot's log holds the Xid, resumes once the
log is clean (GPU reset, `dmesg -C`), and that recheck ends the fault for the hooks too."""
import time

import pytest

from test_agent_cluster import _wait_served, agent  # noqa: F401 - the agent fixture, used by name below
from test_faults import REASON79
from test_health import health_log, log_mark

JOB = "#!/bin/sh\necho ran > {out}\n"
HEALTHY = "healthy-h100x8"


def relink(c, node, scenario):
    """Point the node's fake tools at another scenario WITHOUT forgetting what its hooks saw (dev/cluster.py's
    `scenario` forgets, as after a reboot): the same boot, its kernel log no longer showing the fault."""
    from conftest import REPO
    link = c.dir / "fakegpu" / "nodes" / node
    link.unlink()
    link.symlink_to(REPO / "dev" / "fakegpu" / "scenarios" / scenario)


def new_boot(c, node):
    """What dev/reboot-node gives a node: a new fake boot id (xid.boot_id_file)."""
    (c.dir / "fakegpu" / "boot" / node).write_text(f"dev-boot-{node}-{time.time():.6f}-test\n")


def lose_the_drain(c, node):
    """An admin's resume outside slurmkit (what a slurmctld killed before it saved state also leaves), once the
    node is done with the failed job: slurmd reports the prolog's failure after it, and slurmctld then drains the
    node "Prolog error" (CI once saw that land 9 ms after a resume made while the job was still COMPLETING)."""
    c.wait_node(node, lambda r: "COMPLETING" not in r.flags and not r.cpus_alloc, timeout=60)
    time.sleep(1)
    c.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    c.wait_node(node, lambda r: not r.drained and r.state == "IDLE", timeout=30)
    time.sleep(1)
    rec = c.node(node)
    assert not rec.drained, f"{node} drained again after the resume: {rec}"


def job_on(c, node, out):
    return c.sbatch(JOB.format(out=out), "-w", node, "--gres=gpu:1", "-o", "/dev/null")


def drained_again(c, node, jid, mark, out):
    """The job's prolog on `node` failed with slurmkit's xid79 reason (the fault from earlier this boot), drained
    the node, and the job never ran there."""
    rec = c.wait_node(node, lambda r: r.drained, timeout=90)
    assert rec.reason.startswith(REASON79) and "earlier this boot" in rec.reason, rec.reason
    (x,) = [r for r in health_log(c, since=mark, node=node, context="prolog", job_id=jid) if r["check"] == "xid"]
    assert (x["status"], x["action"], x["code"]) == ("fail", "drained", "xid79"), x
    assert x["evidence"]["new_events"] == 0 and x["evidence"]["active_faults"][0]["tag"] == "xid79"
    assert "Xid (PCI:0000:5d:00): 79" in x["evidence"]["line"]
    c.run("scancel", str(jid), check=False)
    time.sleep(1)
    assert not out.exists()


@pytest.fixture(params=["in-process", "agent"])
def hooks(request, clean):
    """The dev cluster as slurmd runs the hooks: in their own processes, or through the hook agent."""
    if request.param == "agent":
        return request.getfixturevalue("agent"), True
    return clean, False


@pytest.mark.compat("prolog drain")
def test_a_lost_drain_is_made_again_by_the_next_prolog_until_the_node_reboots(hooks, tmp_path):
    c, through_agent = hooks
    c.set_scenario("n2", "xid79")
    out = tmp_path / "ran-1"
    j = job_on(c, "n2", out)
    rec = c.wait_node("n2", lambda r: r.drained, timeout=90)
    assert rec.reason.startswith(REASON79), rec.reason
    c.run("scancel", str(j), check=False)

    # the drain is lost; the Xid mark has moved past the Xid 79: the next prolog fails again all the same
    lose_the_drain(c, "n2")
    mark, out = log_mark(c), tmp_path / "ran-2"
    j = job_on(c, "n2", out)
    drained_again(c, "n2", j, mark, out)
    if through_agent:  # the agent ran that prolog (a warm process: nothing of the first run kept in memory)
        (p,) = _wait_served(c, "prolog", j)
        assert ": exit 1," in p, p

    # the kernel log no longer shows it (same boot): the GPU is still off the bus
    relink(c, "n2", HEALTHY)
    lose_the_drain(c, "n2")
    mark, out = log_mark(c), tmp_path / "ran-3"
    j = job_on(c, "n2", out)
    drained_again(c, "n2", j, mark, out)

    # a new boot with a clean log: the node works again
    new_boot(c, "n2")
    lose_the_drain(c, "n2")
    mark, out = log_mark(c), tmp_path / "ran-4"
    j = job_on(c, "n2", out)
    c.wait_job(j, timeout=90)
    assert out.read_text().strip() == "ran"
    assert not c.node("n2").drained
    (x,) = [r for r in health_log(c, since=mark, node="n2", context="prolog", job_id=j) if r["check"] == "xid"]
    assert x["status"] == "ok", x


@pytest.mark.compat("audit")
def test_audit_resume_recheck_ends_the_fault_once_the_log_is_clean(clean, tmp_path):
    c = clean
    c.set_scenario("n3", "xid79")
    j = job_on(c, "n3", tmp_path / "ran-1")
    rec = c.wait_node("n3", lambda r: r.drained, timeout=90)
    assert rec.reason.startswith(REASON79), rec.reason
    c.run("scancel", str(j), check=False)

    # this boot's log still holds the Xid 79: the recheck fails, nothing is resumed
    r = c.slurmkit("audit", "resume", "n3", "--recheck")
    assert r.returncode == 1 and "n3: refuse:" in r.stdout and "fell off the bus" in r.stdout, r.stdout + r.stderr
    assert c.node("n3").drained

    # the admin reset the GPU and cleared the log (dmesg -C): same boot, the recheck passes over the whole log
    relink(c, "n3", HEALTHY)
    r = c.slurmkit("audit", "resume", "n3", "--recheck")
    assert r.returncode == 0 and "n3: resumed: check xid passed" in r.stdout, r.stdout + r.stderr
    c.wait_node("n3", lambda r: not r.drained, timeout=30)

    # the recheck ended the fault: the next job runs there
    mark, out = log_mark(c), tmp_path / "ran-2"
    j = job_on(c, "n3", out)
    c.wait_job(j, timeout=90)
    assert out.read_text().strip() == "ran"
    assert not c.node("n3").drained
    (x,) = [r for r in health_log(c, since=mark, node="n3", context="prolog", job_id=j) if r["check"] == "xid"]
    assert x["status"] == "ok", x
