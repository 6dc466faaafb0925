"""The prolog's and epilog's first step: hand the hook to the node's hook agent (slurmkit/agent/server.py), if one
runs, and exit with its answer; else return None, and the hook runs in this process as before.

The agent forks, from an interpreter that has already imported slurmkit's hook code, a child that runs exactly the
hook this process would run: the same module's `main()`, with this process's environment, umask, working
directory and standard streams (passed over the socket), and its exit code is this process's. What a job saves is
this interpreter's imports (most of a hook's CPU). It is an optimisation only: no socket, a refused or broken
connection, an agent that answers "run it yourself", or no answer in time, and the caller runs the hook itself.
The verdict never depends on whether the agent runs.

The exchange has two steps, so that a silent agent never holds a hook past Slurm's PrologEpilogTimeout and a hook
never runs twice:
  1. the client sends its request and waits at most `wait` seconds (a third of the hook's timeout in slurm.conf,
     at most MAX_WAIT) for the child's "start <pid>"; a stopped agent, or anything that accepts on the socket and
     never answers, gets no further: the client closes the connection and runs the hook itself, and says so
     (stderr, slurmd's log file, syslog: slurmkit/logsinks.py `alert`). A child that reads the request after its
     answer-by time (the agent was stopped and woke up) drops it without running anything.
  2. the client answers "go", with its stdin/stdout/stderr (it is still there: the child runs the hook only then,
     so the client and the child never both run it; and a listener that never answers never holds the hook's
     output, which slurmd reads to its end) and waits for "rc N" while the hook runs, up to the hook's own time;
     the child ends itself (SIGALRM) just before that, and a child that is stopped is killed by the client,
     which then runs the hook.

Only builtin modules (`_socket`, `posix`, `sys`, `time`) are imported here, and slurmkit/nodeconf.py (slurm.conf's
timeouts; builtins only too); it lives outside slurmkit/hooks/ so that importing it runs no package __init__ but
slurmkit's own and slurmkit/agent's (which import nothing): this runs first, on every job, and when the agent answers, nothing else is
imported at all.
"""

import posix
import sys
import time

from ..nodeconf import safe_node_name, slurm_conf

# where the agent listens: {cluster} is slurm.conf's ClusterName (a host may serve nodes of several clusters, each
# with its own agent); without one, {cluster} and the / before it are dropped: LEGACY_SOCKET, the path of old agents
DEFAULT_SOCKET = "/run/slurmkit/{cluster}/agent.sock"
LEGACY_SOCKET = "/run/slurmkit/agent.sock"
STATUS = b"status"  # a request of this word after MAGIC asks "are you there?": b"agent <pid>" (old agents: b"fallback")
MAGIC = b"slurmkit-hook/2"
MAX_REQUEST = 64 * 1024  # a Slurm hook's environment is a few KiB; a larger one runs in process
# Where slurm.conf names no hook timeout (unset: Slurm waits for the hook without end), the agent's child ends
# itself after CHILD_LIMIT seconds. A hook's own work is bounded far below this (health.budget_seconds, each
# tool's command_timeout, sync.budget), so the limit only catches an agent that broke.
CHILD_LIMIT = 240
CONNECT_TIMEOUT = 2.0
# How long the client waits for the agent to take the hook (step 1): a third of the hook's timeout, at most
# MAX_WAIT; DEFAULT_WAIT where slurm.conf names no timeout; SLURMKIT_AGENT_WAIT (seconds) overrides (1 s or more,
# below half the timeout). A working agent answers in milliseconds: this only bounds a stopped or broken one.
MAX_WAIT = 30.0
DEFAULT_WAIT = 20.0
# The prolog's wait also stays under half of slurm.conf's BatchStartTimeout (Slurm's default: 10 s): slurmctld
# requeues a batch job whose launch, prolog included, took longer than that ("Batch JobId=N missing from batch
# node ... not found BatchStartTime after startup"), seen on the dev cluster with a 20 s wait and the default.
DEFAULT_BATCH_START = 10
LATE = 0.5  # a child that reads a request this close to its answer-by time drops it: the client is leaving


def socket_path(environ, conf: dict[bytes, bytes] | None = None) -> bytes:
    """SLURMKIT_AGENT_SOCKET (the installed hooks set it from the site's `agent.socket`), else DEFAULT_SOCKET, with
    {cluster} filled in from `conf` (parse_slurm_conf); empty, "none" or "off" turns the agent off for this hook.
    `environ` is bytes to bytes (posix.environ)."""
    p = environ.get(b"SLURMKIT_AGENT_SOCKET")
    if p is None:
        p = DEFAULT_SOCKET.encode()
    elif p.strip().lower() in (b"", b"none", b"off"):
        return b""
    return expand_socket(p, conf or {})


def expand_socket(template: bytes, conf: dict[bytes, bytes]) -> bytes:
    """{cluster} in the socket's path -> slurm.conf's ClusterName (a name that can name a directory); without one,
    {cluster} and the / before it are dropped (pure)."""
    if b"{cluster}" not in template:
        return template
    name = conf.get(b"clustername", b"")
    if name and safe_node_name(name.decode("ascii", "replace")):
        return template.replace(b"{cluster}", name)
    return template.replace(b"/{cluster}", b"").replace(b"{cluster}", b"")


def hook_timeout(conf: dict[bytes, bytes], module: str) -> int | None:
    """Seconds slurmd gives this hook (PrologTimeout/EpilogTimeout of 25.05+, else PrologEpilogTimeout), or None:
    not set, unlimited, or unreadable."""
    own = b"prologtimeout" if module.endswith("prolog") else b"epilogtimeout"
    for key in (own, b"prologepilogtimeout"):
        v = conf.get(key)
        if v is not None:
            return int(v) if v.isdigit() and 0 < int(v) < 65534 else None
    return None


def launch_timeout(conf: dict[bytes, bytes], module: str) -> int | None:
    """The prolog: slurm.conf's BatchStartTimeout (Slurm's default when unset or unreadable), the time a batch
    job's launch may take before slurmctld requeues it; the epilog and the health program: None (no launch waits)."""
    if not module.endswith("prolog"):
        return None
    v = conf.get(b"batchstarttimeout", b"")
    return int(v) if v.isdigit() and 0 < int(v) < 65534 else DEFAULT_BATCH_START


def budgets(timeout: int | None, override: bytes | None = None, launch: int | None = None) -> tuple[float, float]:
    """(wait, limit): how long the client waits for the agent to take the hook, and how long the hook may run in
    all, counted from the client's start (pure). `override`: SLURMKIT_AGENT_WAIT; `launch`: launch_timeout()."""
    limit = float(timeout) if timeout else float(CHILD_LIMIT)
    wait = min(limit / 3, MAX_WAIT) if timeout else DEFAULT_WAIT
    if launch:
        wait = min(wait, launch / 2)
    if override:
        try:
            w = float(override)
        except ValueError:
            w = -1.0
        # at least 1 s (a child drops a request LATE s before its answer-by time), and it leaves the hook most of
        # its time: never half of it or more
        if 1 <= w < limit / 2:
            wait = w
    return wait, limit


def request(module: str, environ, umask: int, cwd: bytes, answer_by: int = 0, run_until: int = 0) -> bytes:
    """The one message a hook sends: MAGIC, the hook's module, its umask (octal), its working directory, the
    monotonic times (ns) by which a child must answer and by which the hook must end, then its environment as
    KEY=VALUE, NUL-separated (bytes throughout: no decoding on this side)."""
    env = b"\0".join(k + b"=" + v for k, v in environ.items())
    return b"\0".join((MAGIC, module.encode(), b"%o" % umask, cwd, b"%d" % answer_by, b"%d" % run_until, env))


def parse_start(data: bytes) -> int | None:
    """b"start PID" -> PID; anything else (b"fallback", b"": no child will run it) -> None."""
    if data.startswith(b"start ") and data[6:].isdigit() and len(data) <= 16:
        pid = int(data[6:])
        return pid if pid > 1 else None
    return None


def parse_reply(data: bytes) -> int | None:
    """b"rc N" -> N (0-255); anything else (b"fallback": the agent will not run it; b"": it broke) -> None."""
    if data.startswith(b"rc ") and data[3:].isdigit() and len(data) <= 6:
        n = int(data[3:])
        if n <= 255 and data == b"rc %d" % n:
            return n
    return None


# why the last delegate() of this process ran nothing through the agent (None: it did, or no agent is installed)
fallback_reason: str | None = None


def delegate(module: str) -> int | None:
    """Ask the agent to run `module`'s hook for this process: its exit code, or None (run it here). A fallback
    from an agent that is there (its socket exists) but did not run the hook is said loudly."""
    global fallback_reason
    fallback_reason = None
    environ = posix.environ
    if not socket_path(environ):
        return None
    try:
        import _socket
    except ImportError:
        return None
    t0 = time.monotonic_ns()
    conf = slurm_conf(environ)
    path = socket_path(environ, conf)
    timeout = hook_timeout(conf, module)
    wait, limit = budgets(timeout, environ.get(b"SLURMKIT_AGENT_WAIT"), launch_timeout(conf, module))
    answer_by, run_until = t0 + int(wait * 1e9), t0 + int((limit - 2) * 1e9)
    umask = posix.umask(0o022)
    posix.umask(umask)
    try:
        cwd = posix.getcwdb()
    except OSError:
        cwd = b"/"
    msg = request(module, environ, umask, cwd, answer_by, run_until)
    if len(msg) > MAX_REQUEST:
        return None
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    pid = None
    step = "connect"
    try:
        s.settimeout(min(CONNECT_TIMEOUT, wait))
        s.connect(path)
        step = "send"
        if s.send(msg) != len(msg):  # one record, whole or not at all (SOCK_SEQPACKET)
            raise ConnectionError("the request was cut short")
        step = "start"
        s.settimeout(max(0.001, (answer_by - time.monotonic_ns()) / 1e9))
        first = s.recv(64)
        pid = parse_start(first)
        if pid is None:
            why = f"answered {first[:20]!r}" if first else "hung up without an answer"
            fallback_reason = f"the hook agent at {path.decode(errors='replace')} {why}"
            return None
        # the hook's stdin/stdout/stderr go with the "go" only: a listener that never answers must not hold them
        fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
        s.sendmsg([b"go"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        step = "rc"
        s.settimeout(max(0.001, (t0 + int((limit - 1) * 1e9) - time.monotonic_ns()) / 1e9))
        rc = parse_reply(s.recv(64))
        if rc is None:
            fallback_reason = f"the hook agent's child (pid {pid}) ended without an exit code"
        return rc
    except OSError as e:
        if step == "connect" and isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
            if isinstance(e, ConnectionRefusedError):  # a socket file nobody listens on: a crashed agent
                fallback_reason = f"the hook agent at {path.decode(errors='replace')} refused the connection"
            return None  # no agent (the usual case where none is installed): run in process
        if step in ("connect", "send", "start"):
            conf_note = f" ({_timeout_name(conf, module)}={timeout} in slurm.conf)" if timeout else ""
            fallback_reason = (
                f"the hook agent at {path.decode(errors='replace')} did not take the hook within {wait:g} s"
                f"{conf_note}: {type(e).__name__}"
            )
        elif isinstance(e, TimeoutError):
            fallback_reason = f"the hook agent's child (pid {pid}) did not finish the hook in time"
            _kill(pid)  # stopped or hung: it must not finish the hook after this process has run it
        else:
            fallback_reason = f"the hook agent's child (pid {pid}) broke off: {type(e).__name__}"
        return None
    finally:
        s.close()
        if fallback_reason is not None:
            _say(module, environ, conf)


def _timeout_name(conf: dict[bytes, bytes], module: str) -> str:
    own = "PrologTimeout" if module.endswith("prolog") else "EpilogTimeout"
    return own if own.lower().encode() in conf else "PrologEpilogTimeout"


def _kill(pid: int | None) -> None:
    """SIGKILL the agent's child that took this hook, if that pid is still a slurmkit hook here (the agent may run
    in another pid namespace; its own alarm, just before this client gave up, ends it there when it runs again)."""
    if not pid:
        return
    try:
        fd = posix.open(b"/proc/%d/cmdline" % pid, posix.O_RDONLY | posix.O_CLOEXEC)
        try:
            title = posix.read(fd, 4096)
        finally:
            posix.close(fd)
        if b"slurmkit.hooks." in title:
            posix.kill(pid, 9)
    except OSError:
        pass


def _say(module: str, environ, conf: dict[bytes, bytes]) -> None:
    """The fallback, said loudly (the hook then imports slurmkit anyway: it runs here)."""
    try:
        from ..logsinks import alert

        alert(f"{module.rsplit('.', 1)[1]}: {fallback_reason}; running the hook in this process", conf=conf)
    except Exception:  # noqa: BLE001 - saying it must never stop the hook
        pass
