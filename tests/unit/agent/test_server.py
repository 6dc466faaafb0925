"""The hook agent (slurmkit/agent/server.py) as an admin sees it: the repo's prolog/prolog and epilog/epilog scripts,
run as Slurm runs them, give the same exit code, the same message on stderr and the same health-log verdicts
whether the agent runs them or they run in their own process; and whatever goes wrong with the agent (none
installed, crashed with its socket left behind, refusing, answering nothing) the hook still runs, in process.

The agent is a real process on a socket under tmp_path; the "broken agents" are real sockets served by this test.
The fake GPU tools replay the captures of dev/fakegpu (healthy-h100x8, xid79)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hooksite import sampler_argv, write_site_config
from slurmkit import nodeconf
from slurmkit.agent import client as hookclient
from slurmkit.agent import server as agent
from syslogsock import received, syslog_sock  # noqa: E402,F401 - syslog_sock: a fixture

REPO = Path(__file__).resolve().parents[3]
FAKE = REPO / "dev" / "fakegpu" / "bin"
SCEN = REPO / "dev" / "fakegpu" / "scenarios"


def _config(tmp_path: Path, efficiency: bool = False) -> Path:
    return write_site_config(tmp_path, efficiency=efficiency)


def _site(d: Path, efficiency: bool = False) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    _config(d, efficiency)
    return d


def _env(tmp_path: Path, job: int, scenario: str = "healthy-h100x8", sock: Path | str = "none") -> dict:
    return {"SLURMKIT_CONFIG": str(tmp_path / "slurmkit.yaml"), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN / scenario),
            "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1", "SLURMKIT_PYTHON": sys.executable,
            "SLURMKIT_AGENT_SOCKET": str(sock)}


def _hook(which: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / which / which)], env=env, capture_output=True, text=True, timeout=120)


def _verdicts(tmp_path: Path, job: int) -> list[tuple]:
    out = []
    for line in (tmp_path / "health" / "n1.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["job_id"] == job:
            out.append((r["context"], r["check"], r["status"], r["reason"]))
    return out


class Agent:
    def __init__(self, tmp_path: Path, env: dict | None = None, sock: str | None = None):
        self.sock = tmp_path / "agent" / "agent.sock"
        self.pidf = tmp_path / "agent.pid"
        self.log = tmp_path / "agent.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "slurmkit.agent.server", "--socket", sock or str(self.sock), "--pid-file",
             str(self.pidf)], stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, cwd=str(REPO),
            env=dict(os.environ, **(env or {})))
        deadline = time.monotonic() + 60
        while not self.pidf.exists():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.05)
        self.pid = int(self.pidf.read_text())

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def stop(self, sig=signal.SIGTERM) -> int:
        os.kill(self.pid, sig)
        return self.proc.wait(timeout=30)


@pytest.fixture
def running_agent(tmp_path):
    _config(tmp_path)
    a = Agent(tmp_path)
    yield a
    if a.proc.poll() is None:
        a.stop()


@pytest.mark.parametrize("scenario, code", [("healthy-h100x8", 0), ("xid79", 1)])
def test_prolog_through_the_agent_is_the_prolog(tmp_path, running_agent, scenario, code):
    """Same exit code, same stderr line (the agent's child writes to the hook's own stderr), same verdicts in the
    health log: in process (job 11) and through the agent (job 12)."""
    # each its own node state (a kernel-log event is new to a node once: a second prolog there would pass)
    a, b = _site(tmp_path / "a"), _site(tmp_path / "b")
    here = _hook("prolog", _env(a, 11, scenario))
    there = _hook("prolog", _env(b, 12, scenario, running_agent.sock))
    assert here.returncode == there.returncode == code, (here.stderr, there.stderr)
    assert here.stderr.replace("job 11", "job 12") == there.stderr
    if code:
        assert "slurmkit:xid79 GPU 0000:5d:00 fell off the bus" in there.stderr
    assert [v[:3] for v in _verdicts(a, 11)] == [v[:3] for v in _verdicts(b, 12)]
    assert _verdicts(b, 12), "the agent's prolog wrote no verdicts"
    served = [ln for ln in running_agent.lines() if "prolog job 12 node n1" in ln]
    assert len(served) == 1 and f"exit {code}," in served[0], running_agent.lines()
    assert not [ln for ln in running_agent.lines() if "job 11 " in ln], "the in-process run reached the agent"


def test_epilog_through_the_agent(tmp_path, running_agent):
    a, b = _site(tmp_path / "a"), _site(tmp_path / "b")
    here = _hook("epilog", dict(_env(a, 21, "xid79"), SLURM_JOB_EXIT_CODE="0"))
    there = _hook("epilog", dict(_env(b, 22, "xid79", running_agent.sock), SLURM_JOB_EXIT_CODE="0"))
    assert here.returncode == there.returncode == 0, (here.stderr, there.stderr)  # drain is off: exit 0, logged
    assert here.stderr.replace("job 21", "job 22") == there.stderr
    assert "slurmkit:xid79" in there.stderr
    assert [v[:3] for v in _verdicts(a, 21)] == [v[:3] for v in _verdicts(b, 22)]
    assert any("epilog job 22 node n1: exit 0" in ln for ln in running_agent.lines())


def test_the_hook_runs_in_process_when_the_agent_is_gone(tmp_path):
    """No agent ever (no socket), and an agent killed with SIGKILL (its socket file left, nobody listening): the
    prolog still runs, in its own process, with the same verdict."""
    a_site, b_site = _site(tmp_path / "a"), _site(tmp_path / "b")
    missing = _hook("prolog", _env(a_site, 31, "xid79", tmp_path / "nowhere" / "agent.sock"))
    assert missing.returncode == 1 and "slurmkit:xid79" in missing.stderr
    a = Agent(tmp_path)
    assert a.stop(signal.SIGKILL) == -signal.SIGKILL
    assert a.sock.exists()
    t0 = time.monotonic()
    stale = _hook("prolog", _env(b_site, 32, "xid79", a.sock))
    assert time.monotonic() - t0 < 30  # refused at once, not a wait for an answer
    assert stale.returncode == 1 and "slurmkit:xid79" in stale.stderr
    assert [v[:3] for v in _verdicts(a_site, 31)] == [v[:3] for v in _verdicts(b_site, 32)]
    assert not [ln for ln in a.lines() if " job " in ln]


def _serve_once(path: Path, answer: bytes | None) -> threading.Thread:
    """A broken agent: accepts one connection, reads it, answers `answer` (None: closes without a word)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(path))
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        msg, anc, _, _ = conn.recvmsg(1 << 17, socket.CMSG_SPACE(12))
        for _, _, blob in anc:  # close the descriptors the hook sent
            for i in range(0, len(blob) - len(blob) % 4, 4):
                os.close(int.from_bytes(blob[i:i + 4], sys.byteorder))
        if answer is not None:
            conn.send(answer)
        conn.close()
        srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("answer", [b"fallback", None, b"rc 300", b"garbage"])
def test_a_broken_agent_never_decides(tmp_path, answer):
    """An agent that says "run it yourself", hangs up, or answers nonsense: the hook runs itself and fails the
    faulty node all the same (never exit 0 on a word it cannot read)."""
    _config(tmp_path)
    sock = tmp_path / "broken" / "agent.sock"
    t = _serve_once(sock, answer)
    r = _hook("prolog", _env(tmp_path, 41, "xid79", sock))
    t.join(10)
    assert r.returncode == 1 and "slurmkit:xid79" in r.stderr, r.stderr
    assert _verdicts(tmp_path, 41)


def test_the_agent_runs_only_the_hooks(tmp_path, running_agent):
    """A request for any other module (or a message that is not a hook request) gets "fallback", runs nothing."""
    for msg in (hookclient.request("os", {b"A": b"1"}, 0o022, b"/"), b"hello"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(10)
        s.connect(str(running_agent.sock))
        fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
        s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        assert s.recv(64) == b"fallback"
        s.close()
    assert not [ln for ln in running_agent.lines() if " job " in ln]


def test_the_agent_stops_on_sigterm_and_takes_its_socket(tmp_path, running_agent):
    assert running_agent.stop() == 0
    assert not running_agent.sock.exists()


def test_the_socket_is_root_only(tmp_path, running_agent):
    st_dir, st_sock = running_agent.sock.parent.stat(), running_agent.sock.stat()
    assert st_dir.st_mode & 0o077 == 0 and st_sock.st_mode & 0o077 == 0
    assert st_dir.st_uid == st_sock.st_uid == os.geteuid()


def test_the_agent_refuses_a_directory_others_can_write(tmp_path):
    d = tmp_path / "open"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    r = subprocess.run([sys.executable, "-I", "-m", "slurmkit.agent.server", "--socket", str(d / "agent.sock")],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.returncode != 0 and "mode 0700" in r.stderr


def test_the_sampler_forked_through_the_agent_reads_as_itself(tmp_path):
    """The efficiency sampler a prolog forks inside the agent's child shows its own command line (ps, pgrep -f,
    the epilog's check), and the epilog through the agent stops it and writes the job's record."""
    _config(tmp_path, efficiency=True)
    a = Agent(tmp_path)
    try:
        env = _env(tmp_path, 51, sock=a.sock)
        assert _hook("prolog", env).returncode == 0
        pidf = tmp_path / "state" / "efficiency" / "51.n1.pid"
        pid = int(pidf.read_text().split()[0])
        argv = sampler_argv(pid)
        assert b"slurmkit.efficiency.sampler" in argv and b"51" in argv, argv
        time.sleep(1.0)
        r = _hook("epilog", dict(env, SLURM_JOB_EXIT_CODE="0"))
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
        assert not pidf.exists()
        (rec,) = [json.loads(x) for x in (tmp_path / "efficiency" / "n1.jsonl").read_text().splitlines()]
        assert rec["job_id"] == 51 and rec.get("sampler_cpu_seconds") is not None, rec
    finally:
        a.stop()


# --- the protocol, as pure functions -----------------------------------------------------------------------------

_key = st.binary(min_size=1, max_size=20).filter(lambda b: b"\0" not in b and b"=" not in b)
_val = st.binary(max_size=40).filter(lambda b: b"\0" not in b)


@given(env=st.dictionaries(_key, _val, max_size=12), umask=st.integers(0, 0o777),
       cwd=st.binary(min_size=1, max_size=30).filter(lambda b: b"\0" not in b),
       module=st.sampled_from(agent.HOOKS), times=st.tuples(st.integers(0, 2**63), st.integers(0, 2**63)))
def test_request_round_trip(env, umask, cwd, module, times):
    got = agent.parse_request(hookclient.request(module, env, umask, cwd, *times))
    assert got is not None
    m, u, c, e, by, until = got
    assert (m, u, c, (by, until)) == (module, umask, cwd, times)
    assert {os.fsencode(k): os.fsencode(v) for k, v in e.items()} == env


@given(st.binary(max_size=200))
def test_parse_request_never_raises(data):
    got = agent.parse_request(data)
    assert got is None or got[0] in agent.HOOKS


@given(st.binary(max_size=12))
def test_parse_reply_reads_only_an_exit_code(data):
    n = hookclient.parse_reply(data)
    assert n is None or (data == b"rc %d" % n and 0 <= n <= 255)


def test_parse_reply_examples():
    assert hookclient.parse_reply(b"rc 0") == 0
    assert hookclient.parse_reply(b"rc 1") == 1
    assert hookclient.parse_reply(b"rc 256") is None
    assert hookclient.parse_reply(b"fallback") is None
    assert hookclient.parse_reply(b"") is None


def test_socket_path_can_turn_the_agent_off():
    assert hookclient.socket_path({}) == hookclient.LEGACY_SOCKET.encode()  # no ClusterName: the old path
    assert hookclient.socket_path({}, {b"clustername": b"c1"}) == b"/run/slurmkit/c1/agent.sock"
    for off in (b"", b"none", b"OFF", b" none "):
        assert hookclient.socket_path({b"SLURMKIT_AGENT_SOCKET": off}) == b""
    assert hookclient.socket_path({b"SLURMKIT_AGENT_SOCKET": b"/x/a.sock"}) == b"/x/a.sock"


def _pid_of(line: str) -> int:
    return int(line.rsplit("pid ", 1)[1])


def test_a_child_takes_the_next_hooks_of_a_burst_each_with_its_own_job(tmp_path, running_agent):
    """Hooks one after the other (a burst of jobs): a child that served one takes the next (no fork, no
    copy-on-write faults), and each hook still gets only its own environment, verdict and output, and its
    output pipe closes when it exits (slurmd reads a hook's output to its end)."""
    sites = {j: _site(tmp_path / f"s{j}") for j in range(61, 67)}
    for j, d in sites.items():
        scen = "xid79" if j % 2 else "healthy-h100x8"
        t0 = time.monotonic()
        r = _hook("prolog", _env(d, j, scen, running_agent.sock))
        assert time.monotonic() - t0 < 20
        assert r.returncode == (1 if j % 2 else 0), (j, r.stderr)
        assert ("slurmkit:xid79" in r.stderr) == bool(j % 2), (j, r.stderr)
        assert {v[0] for v in _verdicts(d, j)} == {"prolog"}
        assert [v[1] for v in _verdicts(d, j) if v[2] == "fail"] == (["xid"] if j % 2 else [])
    served = [ln for ln in running_agent.lines() if " job 6" in ln]
    assert len(served) == 6, running_agent.lines()
    # a child waiting for the next hook says so in ps; while it runs one, it reads as that hook
    waiting = [Path(f"/proc/{p}/cmdline").read_bytes() for p in _children(running_agent.pid) if _alive(p)]
    assert any(b"(waiting for a hook)" in c for c in waiting), waiting
    pids = [_pid_of(ln) for ln in served]
    assert len(set(pids)) < len(pids), f"every hook was a fresh fork: {pids}"


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


def test_the_agents_children_leave_with_it(tmp_path, running_agent):
    d = _site(tmp_path / "s")
    assert _hook("prolog", _env(d, 71, sock=running_agent.sock)).returncode == 0
    kids = [k for k in _children(running_agent.pid) if _alive(k)]
    assert kids, "no child waits for the next hook"
    assert running_agent.stop() == 0
    deadline = time.monotonic() + 10
    while any(_alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [k for k in kids if _alive(k)], "a child of the stopped agent is still waiting for hooks"


def test_a_second_agent_is_refused_unless_it_takes_over(tmp_path, running_agent):
    cmd = [sys.executable, "-I", "-m", "slurmkit.agent.server", "--socket", str(running_agent.sock)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.returncode != 0 and "another agent answers" in r.stderr
    # what the agent does when it re-executes itself after an upgrade: the new one takes the socket over
    log = tmp_path / "b.log"
    b = subprocess.Popen(cmd + ["--replace"], stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=str(REPO))
    try:
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        d = _site(tmp_path / "s")
        assert _hook("prolog", _env(d, 81, sock=running_agent.sock)).returncode == 0
        assert "prolog job 81 " in log.read_text()
    finally:
        b.terminate()
        b.wait(timeout=30)


# --- an agent that does not answer (issue 28.3): the hook ends well inside slurm.conf's hook timeout ----------------

def _silent_listener(path: Path) -> socket.socket:
    """Anything that accepts on the agent's socket and never answers (the backlog takes the connection)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(path))
    srv.listen(8)
    return srv


def _slurm_conf(tmp_path: Path, timeout: int) -> Path:
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"# synthetic: only the keys the hook client reads\nSlurmdLogFile={tmp_path}/slurmd-%n.log\n"
                    f"PrologEpilogTimeout={timeout}\n")
    (tmp_path / "slurmd-n1.log").write_text("[2026-12-02T00:00:00.000] slurmd version 22.05.8 started\n")
    return conf


def test_a_listener_that_never_answers_holds_the_hook_a_third_of_its_timeout_at_most(tmp_path, syslog_sock):
    """Something accepts on the agent's socket and says nothing: the prolog waits a third of PrologEpilogTimeout
    (here 6 s: 2 s), runs itself with the same verdict, and says so on stderr, in slurmd's log and in syslog."""
    _config(tmp_path)
    sock = tmp_path / "silent" / "agent.sock"
    srv = _silent_listener(sock)
    path, sys_srv = syslog_sock
    env = dict(_env(tmp_path, 91, "xid79", sock), SLURM_CONF=str(_slurm_conf(tmp_path, 6)),
               SLURMKIT_SYSLOG_SOCKET=str(path))
    try:
        t0 = time.monotonic()
        r = _hook("prolog", env)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert r.returncode == 1 and "slurmkit:xid79" in r.stderr, r.stderr
    assert 2 <= took < 6, took
    assert [v[2] for v in _verdicts(tmp_path, 91) if v[1] == "xid"] == ["fail"]
    said = "did not take the hook within 2 s (PrologEpilogTimeout=6 in slurm.conf)"
    assert said in r.stderr and "running the hook in this process" in r.stderr, r.stderr
    assert said in (tmp_path / "slurmd-n1.log").read_text()
    assert any(said in ln and ln.startswith("<27>") for ln in received(sys_srv))


def test_a_stopped_agent_neither_holds_the_hook_nor_runs_it_late(tmp_path):
    """SIGSTOP on the agent: a healthy prolog runs in process within its wait (2 s of PrologEpilogTimeout=6) and
    passes; once the agent is woken up it drops the request it finds waiting instead of running the hook again."""
    _config(tmp_path)
    a = Agent(tmp_path)
    try:
        os.kill(a.pid, signal.SIGSTOP)
        time.sleep(agent.IDLE_SECONDS + 1)  # no warm child of an earlier hook is left to take it
        env = dict(_env(tmp_path, 92, sock=a.sock), SLURM_CONF=str(_slurm_conf(tmp_path, 6)))
        t0 = time.monotonic()
        r = _hook("prolog", env)
        assert r.returncode == 0 and time.monotonic() - t0 < 6, r.stderr
        assert "did not take the hook within 2 s" in r.stderr
        assert {v[0] for v in _verdicts(tmp_path, 92)} == {"prolog"}
        os.kill(a.pid, signal.SIGCONT)
        deadline = time.monotonic() + 15
        while not [ln for ln in a.lines() if "dropped the prolog of job 92" in ln] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [ln for ln in a.lines() if "dropped the prolog of job 92" in ln], a.lines()
        assert not [ln for ln in a.lines() if "prolog job 92 node" in ln], a.lines()
        # and it serves the next hook as before
        assert _hook("prolog", dict(env, SLURM_JOB_ID="93")).returncode == 0
        assert [ln for ln in a.lines() if "prolog job 93 node n1: exit 0" in ln], a.lines()
    finally:
        os.kill(a.pid, signal.SIGCONT)
        a.stop()


def test_the_wait_is_a_third_of_the_hook_timeout_at_most():
    conf = nodeconf.parse_slurm_conf(b"# x\nSlurmdLogFile=/var/log/slurmd.%n.log  # per node\n"
                                       b"prologepilogtimeout = 60\nNodeName=n1 Port=1\nEpilogTimeout=90\n")
    assert conf[b"slurmdlogfile"] == b"/var/log/slurmd.%n.log"
    assert hookclient.hook_timeout(conf, "slurmkit.hooks.prolog") == 60
    assert hookclient.hook_timeout(conf, "slurmkit.hooks.epilog") == 90      # 25.05+: its own timeout first
    assert hookclient.hook_timeout({}, "slurmkit.hooks.prolog") is None
    assert hookclient.hook_timeout({b"prologepilogtimeout": b"65534"}, "slurmkit.hooks.prolog") is None
    assert hookclient.budgets(60) == (20.0, 60.0)
    assert hookclient.budgets(600) == (hookclient.MAX_WAIT, 600.0)
    assert hookclient.budgets(None) == (hookclient.DEFAULT_WAIT, float(hookclient.CHILD_LIMIT))
    assert hookclient.budgets(60, b"5") == (5.0, 60.0)
    for bad in (b"30", b"-1", b"x", b"0", b"0.5"):          # never half the timeout or more, never nonsense
        assert hookclient.budgets(60, bad) == (20.0, 60.0)
    for t in range(1, 5000, 7):
        wait, limit = hookclient.budgets(t)
        assert wait <= t / 3 and limit == t


def test_the_prolog_waits_under_half_of_batch_start_timeout():
    """slurmctld requeues a batch job whose launch (its prolog included) takes longer than BatchStartTimeout
    (seen on the dev cluster: "Batch JobId=3 missing from batch node n1 (not found BatchStartTime after startup)"
    after a 20 s wait under Slurm's default 10 s): the prolog's wait for a silent agent stays under half of it."""
    conf = nodeconf.parse_slurm_conf(b"PrologEpilogTimeout=60\n")
    launch = hookclient.launch_timeout(conf, "slurmkit.hooks.prolog")
    assert launch == hookclient.DEFAULT_BATCH_START == 10                      # Slurm's default when unset
    assert hookclient.budgets(60, None, launch) == (5.0, 60.0)
    conf = nodeconf.parse_slurm_conf(b"PrologEpilogTimeout=60\nBatchStartTimeout=60\n")
    assert hookclient.budgets(60, None, hookclient.launch_timeout(conf, "slurmkit.hooks.prolog")) == (20.0, 60.0)
    assert hookclient.launch_timeout(conf, "slurmkit.hooks.epilog") is None      # no launch waits for an epilog
    assert hookclient.budgets(60, None, None) == (20.0, 60.0)
    for bad in (b"x", b"0", b"70000"):
        assert hookclient.launch_timeout({b"batchstarttimeout": bad}, "slurmkit.hooks.prolog") == 10


def test_parse_start_reads_only_a_pid():
    assert hookclient.parse_start(b"start 1234") == 1234
    for bad in (b"start 1", b"start 0", b"start -3", b"start ", b"fallback", b"late", b"", b"start 12345678901234"):
        assert hookclient.parse_start(bad) is None


def test_a_child_that_took_the_hook_and_stopped_is_killed_and_the_hook_runs_here(tmp_path):
    """Step 2 of the exchange: the child said "start", got its "go" and the hook's descriptors, then stopped (here a
    sleeping stand-in process titled as a hook, served by a fake agent). The client gives up just before the
    hook's timeout (PrologEpilogTimeout=6: 5 s), kills that child so it never finishes the hook late, and runs the
    hook itself."""
    _config(tmp_path)
    sock = tmp_path / "fake" / "agent.sock"
    srv = _silent_listener(sock)
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "slurmkit.hooks.prolog"])
    held = []

    def serve():
        conn, _ = srv.accept()
        conn.recv(hookclient.MAX_REQUEST)
        conn.send(b"start %d" % stopped.pid)
        _, anc, _, _ = conn.recvmsg(16, socket.CMSG_SPACE(12))
        for _, _, blob in anc:
            for i in range(0, len(blob) - len(blob) % 4, 4):
                os.close(int.from_bytes(blob[i:i + 4], sys.byteorder))
        held.append(conn)  # never answers

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        r = _hook("prolog", dict(_env(tmp_path, 94, sock=sock), SLURM_CONF=str(_slurm_conf(tmp_path, 6))))
        took = time.monotonic() - t0
        assert r.returncode == 0 and 5 <= took < 10, (took, r.stderr)
        assert f"the hook agent's child (pid {stopped.pid}) did not finish the hook in time" in r.stderr, r.stderr
        assert stopped.wait(timeout=10) == -signal.SIGKILL
        assert {v[0] for v in _verdicts(tmp_path, 94)} == {"prolog"}
    finally:
        stopped.kill()
        for c in held:
            c.close()
        srv.close()
