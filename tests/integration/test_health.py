"""Health checks and the prolog/epilog on the real dev cluster (fake GPU tools, real Slurm 22.05)."""
import json
import time

import pytest

from slurmkit import config, drain, healthlog

ADMIN = "admin: PSU swap ticket 4411"


def site(cluster):
    return config.load(str(cluster.site_config))


def log_mark(cluster):
    """How many records each node's health log holds now (an earlier cluster in the same dir reused job ids)."""
    counts: dict = {}
    for rec in healthlog.read(site(cluster).paths.health_log):
        counts[rec.get("node")] = counts.get(rec.get("node"), 0) + 1
    return counts


def health_log(cluster, since=None, **match):
    """Records written after the mark `since` (from log_mark) that match every key=value given."""
    since = since or {}
    seen: dict = {}
    out = []
    for rec in healthlog.read(site(cluster).paths.health_log):
        n = rec.get("node")
        seen[n] = seen.get(n, 0) + 1
        if seen[n] <= since.get(n, 0):
            continue
        if all(rec.get(k) == v for k, v in match.items()):
            out.append(rec)
    return out


def wait_log(cluster, since, timeout=60.0, **match):
    """The health-log records matching `match` once there are some (a hook writes them after the job ended)."""
    deadline = time.monotonic() + timeout
    recs = []
    while time.monotonic() < deadline and not recs:
        recs = health_log(cluster, since=since, **match)
        time.sleep(0.3)
    return recs


def wait_started(path, timeout=60.0):
    """The job's script is running (RUNNING alone can still be its prolog: PrologFlags=Alloc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return
        time.sleep(0.2)
    raise AssertionError(f"job never started: {path} missing")


def blocker(cluster, node):
    jid = cluster.sbatch("#!/bin/sh\nsleep 300\n", "-w", node, "--gres=gpu:8", "--exclusive", "-o", "/dev/null")
    cluster.wait_job(jid, ("RUNNING",), timeout=60)
    return jid


@pytest.mark.compat("prolog drain")
def test_xid79_node_is_drained_and_the_job_completes_on_a_healthy_node(clean, tmp_path):
    cluster = clean
    cluster.set_scenario("n3", "xid79")          # n3 replays the real Xid 79 capture
    blockers = {n: blocker(cluster, n) for n in ("n1", "n2", "n4")}   # only n3 is free: the job lands there
    out = tmp_path / "job.out"
    mark = log_mark(cluster)
    jid = cluster.sbatch("#!/bin/sh\necho ran-on $SLURMD_NODENAME\n", "--gres=gpu:1", "-o", str(out))
    n3 = cluster.wait_node("n3", lambda r: r.drained, timeout=60)
    assert n3.reason == "slurmkit:xid79 GPU 0000:5d:00 fell off the bus; reboot the node"
    # Slurm requeued the job (nohold_on_prolog_fail); free a healthy node for it
    cluster.run("scancel", str(blockers["n1"]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        j = cluster.backend.job(jid)
        if j.state == "PENDING" and j.restarts >= 1:
            break
        time.sleep(0.3)
    assert j.restarts >= 1, j
    # skip Slurm's ~120 s BeginTime hold after a requeue (see COMMON.md "Measured here"); placement stays Slurm's
    cluster.run("scontrol", "update", f"JobId={jid}", "StartTime=now+2", check=False)
    done = cluster.wait_job(jid, ("COMPLETED",), timeout=90)
    assert done.nodes == "n1"
    assert out.read_text().strip() == "ran-on n1"
    recs = health_log(cluster, since=mark, node="n3", context="prolog", job_id=jid, status="fail")
    assert len(recs) == 1 and recs[0]["check"] == "xid" and recs[0]["action"] == "drained"
    assert "NVRM: Xid (PCI:0000:5d:00): 79" in recs[0]["evidence"]["line"]
    assert cluster.node("n3").reason == n3.reason              # Slurm kept our reason, not "Prolog error"
    for b in blockers.values():
        cluster.run("scancel", str(b), check=False)


def test_fifty_jobs_on_healthy_nodes_drain_nothing(clean):
    cluster = clean
    mark = log_mark(cluster)
    jid = cluster.sbatch("#!/bin/sh\ntrue\n", "--array=1-50", "--gres=gpu:1", "-o", "/dev/null")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        r = cluster.run("squeue", "-h", "-j", str(jid), "-o", "%i")
        if not r.stdout.strip():
            break
        time.sleep(1)
    assert not cluster.run("squeue", "-h", "-j", str(jid), "-o", "%i").stdout.strip()
    assert not [n.name for n in cluster.backend.nodes() if n.drained]
    recs = health_log(cluster, since=mark)
    assert len({r["job_id"] for r in recs if r["context"] == "prolog" and r["check"] == "xid"}) == 50
    assert len({r["job_id"] for r in recs if r["context"] == "epilog" and r["check"] == "xid"}) == 50
    assert [r for r in recs if r["status"] == "fail"] == []


@pytest.mark.compat("drain/resume")
def test_an_admins_drain_reason_is_left_untouched(clean, tmp_path):
    cluster = clean
    s = site(cluster)
    cluster.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={ADMIN}")
    assert drain.drain_node(s, "n2", "slurmkit:xid79 GPU 0000:5d:00 fell off the bus") == "skipped-admin-drain"
    assert drain.resume_node(s, "n2") == "skipped-not-ours"
    assert cluster.node("n2").reason == ADMIN and cluster.node("n2").drained
    # and through the epilog: a job on n2, the admin drains n2 while it runs, the GPU then shows Xid 79
    cluster.run("scontrol", "update", "NodeName=n2", "State=RESUME")
    mark = log_mark(cluster)
    started = tmp_path / "started"
    jid = cluster.sbatch(f"#!/bin/sh\ntouch {started}\nsleep 4\n", "-w", "n2", "--gres=gpu:1", "-o", "/dev/null")
    wait_started(started)
    cluster.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={ADMIN}")
    cluster.set_scenario("n2", "xid79")
    cluster.wait_job(jid, ("COMPLETED",), timeout=60)
    recs = wait_log(cluster, mark, node="n2", context="epilog", job_id=jid, status="fail")
    assert recs and recs[0]["check"] == "xid" and recs[0]["action"] == "skipped-admin-drain"
    n2 = cluster.node("n2")
    assert n2.drained and n2.reason == ADMIN


@pytest.mark.compat("drain/resume")
def test_slurmkit_resumes_only_its_own_drain(clean):
    cluster = clean
    s = site(cluster)
    reason = drain.reason_for(s, "ecc", "GPU 0000:10:1c: row remapping pending (GPU reset needed)")
    assert drain.drain_node(s, "n4", reason, dry_run=True) == "would-drain"
    assert not cluster.node("n4").drained
    assert drain.drain_node(s, "n4", reason) == "drained"
    assert drain.drain_node(s, "n4", reason) == "already-drained"
    assert drain.drain_node(s, "n4", drain.reason_for(s, "xid48", "GPU 0000:10:1c Double Bit ECC Error")) == \
        "already-drained"
    assert cluster.node("n4").reason == reason          # the first reason stays
    assert drain.resume_node(s, "n4") == "resumed"
    cluster.wait_node("n4", lambda r: not r.drained)


def test_a_hanging_nvidia_smi_fails_the_prolog_within_its_timeout(clean):
    cluster = clean
    timeout = site(cluster).health.command_timeout
    cluster.set_scenario("n4", "hang")
    t0 = time.monotonic()
    mark = log_mark(cluster)
    jid = cluster.sbatch("#!/bin/sh\ntrue\n", "-w", "n4", "--gres=gpu:1", "-o", "/dev/null")
    n4 = cluster.wait_node("n4", lambda r: r.drained, timeout=40)
    took = time.monotonic() - t0
    assert n4.reason.startswith("slurmkit:gpu_count nvidia-smi -q timed out after")
    recs = health_log(cluster, since=mark, node="n4", context="prolog", job_id=jid)
    by = {r["check"]: r for r in recs}
    assert by["gpu_count"]["status"] == "fail" and by["gpu_count"]["evidence"]["timed_out"] is True
    # killed at its timeout, not left hanging; and the same hung call is not waited for once per check
    assert timeout <= by["gpu_count"]["profile_seconds"] < timeout + 2.5
    assert by["ecc"]["status"] == "fail" and took < 30
    # Slurm runs the epilog for that allocation too: it hits the same hang, and keeps our first reason
    cluster.run("scancel", str(jid), check=False)
    deadline = time.monotonic() + 30
    epi = []
    while time.monotonic() < deadline and not epi:
        epi = health_log(cluster, since=mark, node="n4", context="epilog", job_id=jid, status="fail")
        time.sleep(0.3)
    assert epi and epi[0]["action"] == "already-drained"
    assert cluster.node("n4").reason == n4.reason
    # the admin's view: `slurmkit check` on that node says the same, within the timeout, and exits 1
    env = dict(cluster.env, SLURMKIT_FAKE_NODE="n4", SLURMKIT_FAKEGPU_DIR=str(cluster.dir / "fakegpu"))
    t0 = time.monotonic()
    r = cluster.slurmkit("check", "--only", "ecc", "--json", env=env)
    assert r.returncode == 1 and time.monotonic() - t0 < timeout + 5
    assert "timed out" in json.loads(r.stdout)["results"][0]["reason"]


def test_epilog_drains_a_node_with_processes_left_on_the_jobs_gpus(clean, tmp_path):
    cluster = clean
    mark = log_mark(cluster)
    started = tmp_path / "started"
    jid = cluster.sbatch(f"#!/bin/sh\ntouch {started}\nsleep 3\n", "-w", "n1", "--gres=gpu:8", "-o", "/dev/null")
    wait_started(started)
    cluster.set_scenario("n1", "procs-left")       # a process that outlives the job holds GPU 0
    cluster.wait_job(jid, ("COMPLETED",), timeout=60)
    n1 = cluster.wait_node("n1", lambda r: r.drained, timeout=30)
    assert n1.reason.startswith("slurmkit:gpu_procs left on the GPU: GPU 0 (0000:18:00): pid 4242 (python)")
    (rec,) = health_log(cluster, since=mark, node="n1", context="epilog", job_id=jid, status="fail")
    assert rec["check"] == "gpu_procs" and rec["action"] == "drained"
    assert rec["evidence"]["gpus"][0]["processes"][0]["pid"] == 4242
    assert rec["seconds"] >= 1.0                   # it gave the job's processes their grace period first
    assert cluster.node("n1").reason == n1.reason  # the epilog exited 0: no "Epilog error" over our reason


def test_a_cpu_job_is_not_refused_over_a_gpu_it_does_not_use(clean):
    cluster = clean
    cluster.set_scenario("n1", "procs-left")        # something holds GPU 0 of n1
    mark = log_mark(cluster)
    jid = cluster.sbatch("#!/bin/sh\ntrue\n", "-w", "n1", "-o", "/dev/null")      # no GPUs asked
    cluster.wait_job(jid, ("COMPLETED",), timeout=60)
    assert not cluster.node("n1").drained
    # the prolog judges the job's GPUs (none); the epilog, given no SLURM_JOB_GPUS, cannot tell a CPU job from a
    # GPU job whose record was lost: it checks every GPU and warns, never drains (issue 20.6)
    (ep,) = wait_log(cluster, mark, node="n1", job_id=jid, check="gpu_procs", context="epilog")
    (pro,) = health_log(cluster, since=mark, node="n1", job_id=jid, check="gpu_procs", context="prolog")
    assert (pro["status"], ep["status"]) == ("ok", "warn"), (pro, ep)
    assert "left on the GPU" in ep["reason"] and "pid" in ep["reason"] and "GPUs are unknown" in ep["reason"]
    assert ep["evidence"]["job_gpus"] is None
