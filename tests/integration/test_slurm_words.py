"""Issue 35 on the real dev cluster (every version): Slurm's words read exactly.

35.1 an admin's reason that itself ends in `[user@time]` is read whole, with Slurm's own user and time;
35.2 "could not ask Slurm" is exit 3, never the 1 of "nodes are out of service";
35.3 a reason Slurm kept from before a resume is history, not the cause, when the node's slurmd later stops;
35.4 a drained node whose last job is still completing is `draining`, as `sinfo -o %T` words it, and the full
     listing and the one-node lookup read the same state.
"""
import json
import os
import shutil
import signal
import subprocess
import time
from datetime import datetime

import pytest

from test_faults import _alive, start_slurmctld, stop_slurmctld

XID = "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"
BOB = "moved to rack 4 [bob@2026-01-01T00:00:00]"


def nodes_json(c, *args):
    r = c.slurmkit("nodes", "--json", *args)
    assert r.returncode == 0, r.stderr
    return {n["name"]: n for n in json.loads(r.stdout)["nodes"]}


def audit_json(c):
    r = c.slurmkit("audit", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == (1 if doc["nodes"] else 0), (r.returncode, r.stderr)
    return {n["node"]: n for n in doc["nodes"]}, doc["summary"]


def scontrol_state(c, node):
    line = c.run("scontrol", "-o", "show", "node", node).stdout
    return line.split(" State=", 1)[1].split()[0]


def local_age(text):   # Slurm prints times in the controller's (this machine's) local time
    return (datetime.now().astimezone() - datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").astimezone()).total_seconds()


# --- 35.1 ----------------------------------------------------------------------------------------------------------

@pytest.mark.compat("nodes", "audit")
def test_an_admin_reason_ending_in_user_at_time_is_read_whole(clean):
    c = clean
    c.run("scontrol", "update", "NodeName=n4", "State=DRAIN", f"Reason={BOB}")
    line = c.run("scontrol", "-o", "-d", "show", "node", "n4").stdout
    assert f"Reason={BOB} [" in line                    # scontrol prints Slurm's own [user@time] after it
    slurm_user = line.rsplit(" [", 1)[1].split("@")[0]
    full, named = nodes_json(c)["n4"], nodes_json(c, "n4")["n4"]
    for rec in (full, named):                           # the version's full listing and the one-node lookup
        assert (rec["reason"], rec["reason_user"]) == (BOB, slurm_user)
        assert 0 <= local_age(rec["reason_time"]) < 600
    keys = ("state_text", "reason", "reason_user", "reason_time", "gpus_total", "gpus_used", "partitions")
    assert [full[k] for k in keys] == [named[k] for k in keys]
    nodes, summary = audit_json(c)
    assert (nodes["n4"]["by"], nodes["n4"]["reason"]) == ("admin", BOB)
    assert nodes["n4"]["age_seconds"] < 600 and summary["gpu_hours_lost"] < 8 * 600 / 3600 + 0.01


# --- 35.2 ----------------------------------------------------------------------------------------------------------

def _one_clean_line(r):
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmkit: error:"), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.compat("nodes", "audit")
def test_no_controller_at_the_configured_port_is_exit_3(cluster, tmp_path):
    text = cluster.conf.read_text()
    dead = "\n".join("SlurmctldPort=6999" if ln.startswith("SlurmctldPort=") else ln for ln in text.splitlines())
    conf = tmp_path / "slurm.conf"
    conf.write_text(dead + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("slurm:\n  timeout: 3\n")
    env = dict(cluster.env, SLURM_CONF=str(conf))
    for args in (["audit"], ["audit", "--json"], ["nodes"], ["nodes", "n1"]):
        r = cluster.slurmkit("--config", str(cfg), *args, env=env)
        assert r.returncode == 3, (args, r.returncode, r.stderr)
        _one_clean_line(r)


@pytest.fixture
def ctld_back(clean):
    yield clean
    if not _alive(json.loads((clean.dir / "pids.json").read_text())["slurmctld"]):
        start_slurmctld(clean)
    clean.reset()


@pytest.mark.compat("nodes", "audit")
def test_a_stopped_controller_is_exit_3_and_nodes_out_is_still_1(ctld_back):
    c = ctld_back
    c.run("scontrol", "update", "NodeName=n4", "State=DRAIN", "Reason=admin: PSU swap ticket 4411")
    assert c.slurmkit("audit").returncode == 1          # a node out of service: 1
    stop_slurmctld(c)
    for args in (["audit"], ["audit", "--csv"], ["nodes"], ["nodes", "n4"]):
        r = c.slurmkit(*args, timeout=120)
        assert r.returncode == 3, (args, r.returncode, r.stderr)
        _one_clean_line(r)


# --- 35.3 / 35.4: a slurmd stopped, and started again by the test ----------------------------------------------

def _slurmd_pid(c, node):
    return int((c.dir / "run" / f"slurmd-{node}.pid").read_text().strip())


def stop_slurmd(c, node):
    pid = _slurmd_pid(c, node)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)


def start_slurmd(c, node):
    slurmd = shutil.which("slurmd") or "/usr/sbin/slurmd"
    subprocess.run([slurmd, "-f", str(c.conf), "-N", node], check=True, timeout=60, env=c.env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        st = scontrol_state(c, node)
        if "NOT_RESPONDING" not in st and "DOWN" not in st:
            return
        time.sleep(0.5)
    raise AssertionError(f"{node} did not come back: {st}")


@pytest.fixture
def slurmd_back(clean):
    stopped = []
    yield clean, stopped
    for node in stopped:
        try:
            _slurmd_pid_alive = _alive(_slurmd_pid(clean, node))
        except (OSError, ValueError):
            _slurmd_pid_alive = False
        if not _slurmd_pid_alive:
            start_slurmd(clean, node)
    clean.reset()


@pytest.mark.slow
@pytest.mark.compat("audit")
def test_a_reason_from_before_the_resume_is_history_when_slurmd_stops(slurmd_back):
    c, stopped = slurmd_back
    c.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={XID}")
    time.sleep(2)                                       # the resume comes later than the reason, as in life
    c.run("scontrol", "update", "NodeName=n2", "State=RESUME")
    kept = c.node("n2").reason                          # 24.11 keeps it on the idle node; 22.05 and 26.05 clear it
    assert kept in ("", XID)
    stopped.append("n2")
    stop_slurmd(c, "n2")
    seen = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        nodes, _ = audit_json(c)
        n2 = nodes.get("n2")
        if n2:
            seen.append((n2["condition"], n2["by"], n2["cause"], n2["reason"], n2.get("reason_history")))
            # whatever the moment: Slurm's not responding, never slurmkit's old xid79
            assert (n2["by"], n2["cause"], n2["check"]) == ("slurm", "not-responding", None), n2
            assert not n2["reason"].startswith("slurmkit:"), n2
            if kept:
                assert n2["reason_history"]["reason"] == XID, n2
            if n2["condition"] == "down":
                assert 0 <= n2["age_seconds"] < 300, n2
                break
        time.sleep(2)
    assert seen and seen[-1][0] == "down", seen
    if kept:
        r = c.slurmkit("audit")
        assert "history, not the cause: " + XID in r.stdout, r.stdout


@pytest.fixture
def slow_epilog_n3(clean):
    """A plain epilog on n3 only (the dev cluster's wrapper execs hooks/epilog.<node> when there is one) that takes
    25 s: the node keeps its last job COMPLETING that long."""
    hook = clean.dir / "hooks" / "epilog.n3"
    hook.write_text("#!/bin/sh\nsleep 25\nexit 0\n")
    hook.chmod(0o755)
    yield clean
    hook.unlink(missing_ok=True)
    deadline = time.monotonic() + 60
    while "COMPLETING" in scontrol_state(clean, "n3") and time.monotonic() < deadline:
        time.sleep(0.5)
    clean.reset()


@pytest.mark.compat("nodes", "audit")
def test_a_drained_node_whose_last_job_completes_is_draining_from_every_source(slow_epilog_n3):
    c = slow_epilog_n3
    job = c.sbatch("#!/bin/sh\nsleep 300\n", "-w", "n3", "--gres=gpu:1", "-o", "/dev/null")
    c.wait_job(job, states=("RUNNING",))
    c.run("scontrol", "update", "NodeName=n3", "State=DRAIN", f"Reason={XID}")
    c.run("scancel", str(job))
    deadline = time.monotonic() + 15
    while "COMPLETING" not in scontrol_state(c, "n3") and time.monotonic() < deadline:
        time.sleep(0.2)
    before = c.run("sinfo", "-h", "-N", "-n", "n3", "-o", "%T").stdout.strip()
    nodes, _ = audit_json(c)
    full, named = nodes_json(c)["n3"], nodes_json(c, "n3")["n3"]
    after = c.run("sinfo", "-h", "-N", "-n", "n3", "-o", "%T").stdout.strip()
    assert "COMPLETING" in scontrol_state(c, "n3"), "the epilog ended before the reads: the moment was missed"
    assert before == after == "draining"                # Slurm's own word for the moment
    assert nodes["n3"]["condition"] == "draining" and nodes["n3"]["by"] == "slurmkit"
    assert full["state_text"] == named["state_text"] and {"COMPLETING", "DRAIN"} <= set(full["flags"]), (full, named)
