"""The hook agent on the real dev cluster: slurmd runs the Prolog/Epilog wrappers for real jobs, the wrappers hand
them to this cluster's agent (`dev/cluster.py agent start`), and what an admin sees is what the hooks in their own
processes give: jobs complete on a healthy node, a faulty node is drained with slurmkit's reason and its job goes
elsewhere, every verdict is in the health log. A crashed agent (SIGKILL, socket left behind) changes nothing but
who runs the hook. The agent's log says which hooks it ran."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_faults import REASON79
from test_health import health_log, log_mark

REPO = Path(__file__).resolve().parents[2]


def _agent(c, *args):
    return subprocess.run([sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(c.dir), "agent", *args],
                          capture_output=True, text=True, timeout=120, check=True)


_OFFSET = {"log": 0}  # where this test's part of log/agent.log starts (job ids repeat across clusters in a dir)


def _served(c, which: str, job: int) -> list[str]:
    log = c.dir / "log" / "agent.log"
    if not log.exists():
        return []
    with open(log, "rb") as f:
        f.seek(_OFFSET["log"])
        text = f.read().decode(errors="replace")
    return [ln for ln in text.splitlines() if f"{which} job {job} " in ln]


def _running(c) -> bool:
    pids = json.loads((c.dir / "pids.json").read_text())
    return bool(pids.get("agent")) and Path(f"/proc/{pids['agent']}").exists()


@pytest.fixture
def agent(clean):
    log = clean.dir / "log" / "agent.log"
    _OFFSET["log"] = log.stat().st_size if log.exists() else 0
    before = _running(clean)  # `dev/test.sh --agent`: the cluster runs one already, and keeps it after
    _agent(clean, "start")
    yield clean
    _agent(clean, "stop")
    if before:
        _agent(clean, "start")


def _wait_served(c, which, job, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = _served(c, which, job)
        if lines:
            return lines
        time.sleep(0.2)
    raise AssertionError(f"the agent never ran the {which} of job {job}")


def test_jobs_run_through_the_agent(agent):
    c = agent
    mark = log_mark(c)
    jobs = [c.sbatch("#!/bin/sh\ntrue\n", "--gres=gpu:1", "-o", "/dev/null") for _ in range(3)]
    for j in jobs:
        c.wait_job(j, timeout=90)
    for j in jobs:
        (p,) = _wait_served(c, "prolog", j)
        (e,) = _wait_served(c, "epilog", j)
        assert ": exit 0," in p and ": exit 0," in e, (p, e)
        recs = [r for r in health_log(c, mark) if r.get("job_id") == j]
        assert {r["context"] for r in recs} >= {"prolog", "epilog"}, recs
        assert all(r["status"] != "fail" for r in recs), recs


@pytest.mark.compat("dev cluster")
def test_agent_status_on_the_cluster(agent):
    """`slurmkit agent status` (through `dev/cluster.py agent status`, where that version's slurmd runs): exit 0
    with the agent's pid and the hooks it served while it runs; exit 1, "NOT RUNNING" with the socket, once it
    stops."""
    c = agent
    j = c.sbatch("#!/bin/sh\ntrue\n", "--gres=gpu:1", "-o", "/dev/null")
    c.wait_job(j, timeout=90)
    _wait_served(c, "epilog", j)
    pid = json.loads((c.dir / "pids.json").read_text())["agent"]
    deadline = time.monotonic() + 10
    while True:  # the agent writes its counts at most once a second
        doc = json.loads(_agent(c, "status", "--json").stdout)
        if doc.get("hooks_served", 0) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert doc["state"] == "answering" and doc["pid"] == pid and doc["hooks_served"] >= 2, doc
    _agent(c, "stop")
    r = subprocess.run([sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(c.dir), "agent", "status"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"agent: NOT RUNNING: no socket at {c.dir}/run/agent/agent.sock" in r.stdout


def test_a_faulty_node_is_drained_through_the_agent(agent):
    c = agent
    c.set_scenario("n2", "xid79")
    mark = log_mark(c)
    j = c.sbatch("#!/bin/sh\ntrue\n", "--gres=gpu:1", "-o", "/dev/null", "-w", "n2")
    rec = c.wait_node("n2", lambda r: r.drained, timeout=60)
    assert rec.reason.startswith(REASON79), rec.reason
    (p,) = _wait_served(c, "prolog", j)
    assert ": exit 1," in p, p
    fails = [r for r in health_log(c, mark) if r.get("job_id") == j and r["status"] == "fail"]
    assert fails and fails[0]["check"] == "xid", fails


def test_a_crashed_agent_leaves_the_hooks_running(agent):
    c = agent
    _agent(c, "stop", "--kill")
    assert (c.dir / "run" / "agent" / "agent.sock").exists()  # what a crash leaves
    mark = log_mark(c)
    j = c.sbatch("#!/bin/sh\ntrue\n", "--gres=gpu:1", "-o", "/dev/null")
    c.wait_job(j, timeout=90)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        recs = [r for r in health_log(c, mark) if r.get("job_id") == j]
        if {r["context"] for r in recs} >= {"prolog", "epilog"}:
            break
        time.sleep(0.2)
    assert {r["context"] for r in recs} >= {"prolog", "epilog"}, recs
    assert not _served(c, "prolog", j) and not _served(c, "epilog", j)


def _slurmd_log_lines(c, node: str, start: int, needle: str) -> list[str]:
    with open(c.dir / "log" / f"slurmd-{node}.log", "rb") as f:
        f.seek(start)
        return [ln for ln in f.read().decode(errors="replace").splitlines() if needle in ln]


@pytest.mark.slow
@pytest.mark.compat("prolog drain")
@pytest.mark.parametrize("fault", ["silent-listener", "stopped-agent"])
def test_an_agent_that_does_not_answer_costs_a_third_of_the_prolog_timeout_not_the_node(agent, fault):
    """Issue 28.3: something that accepts on the agent's socket and never answers, or the agent under SIGSTOP. A
    healthy job's prolog waits a third of PrologEpilogTimeout (60 s: 20 s), runs in process and passes; the job
    runs, both hooks' verdicts are in the health log, the node is never drained ("Prolog error"), and slurmd's
    log says the hooks ran without the agent. A stopped agent, once woken, runs neither hook late."""
    c = agent
    sock = c.dir / "run" / "agent" / "agent.sock"
    pid = json.loads((c.dir / "pids.json").read_text())["agent"]
    listener = None
    if fault == "silent-listener":
        _agent(c, "stop")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(str(sock))
        listener.listen(16)
    else:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(5)  # no warm child of an earlier hook is left to take the next one
    slurmd_log = c.dir / "log" / "slurmd-n1.log"
    start = slurmd_log.stat().st_size
    mark = log_mark(c)
    try:
        t0 = time.monotonic()
        j = c.sbatch("#!/bin/sh\ntrue\n", "--gres=gpu:1", "-o", "/dev/null", "-w", "n1")
        # the script ran (RUNNING comes before the prolog ends: PrologFlags=Alloc), well inside the 60 s
        c.wait_job(j, states=("COMPLETING", "COMPLETED"), timeout=45, interval=0.5)
        assert time.monotonic() - t0 < 45, "the prolog took most of PrologEpilogTimeout"
        try:
            c.wait_job(j, timeout=60)
        except AssertionError as e:  # requeued once in CI (22.05): say what slurmd and the hooks saw
            seen = [r for r in health_log(c, mark) if r.get("job_id") == j]
            raise AssertionError(f"{e}\nslurmd: {_slurmd_log_lines(c, 'n1', start, '')[-25:]}\nhealth log: {seen}\n"
                                 f"agent log: {_agent_log(c)[-10:]}") from None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            recs = [r for r in health_log(c, mark) if r.get("job_id") == j]
            if {r["context"] for r in recs} >= {"prolog", "epilog"}:
                break
            time.sleep(0.5)
        assert {r["context"] for r in recs} >= {"prolog", "epilog"}, recs
        assert all(r["status"] != "fail" for r in recs), recs
        n1 = c.node("n1")
        assert not n1.drained and "Prolog error" not in (n1.reason or ""), n1
        said = "did not take the hook within 20 s (PrologEpilogTimeout=60 in slurm.conf)"
        lines = _slurmd_log_lines(c, "n1", start, said)
        assert [ln for ln in lines if "slurmkit prolog:" in ln] and [ln for ln in lines if "slurmkit epilog:" in ln], \
            _slurmd_log_lines(c, "n1", start, "")[-20:]
    finally:
        if listener is not None:
            listener.close()
            sock.unlink(missing_ok=True)
        else:
            os.kill(pid, signal.SIGCONT)
    if fault == "stopped-agent":
        for which in ("prolog", "epilog"):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not [
                ln for ln in _agent_log(c) if f"dropped the {which} of job {j}:" in ln
            ]:
                time.sleep(0.3)
            assert [ln for ln in _agent_log(c) if f"dropped the {which} of job {j}:" in ln], _agent_log(c)[-10:]
        assert not _served(c, "prolog", j) and not _served(c, "epilog", j)


def _agent_log(c) -> list[str]:
    log = c.dir / "log" / "agent.log"
    with open(log, "rb") as f:
        f.seek(_OFFSET["log"])
        return f.read().decode(errors="replace").splitlines()
