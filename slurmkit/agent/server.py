"""The node's hook agent: runs the prolog and epilog for the hooks' thin client (slurmkit/agent/client.py) in a
child forked from an interpreter that has their code loaded already.

    python -I -m slurmkit.agent.server [--socket /run/slurmkit/{cluster}/agent.sock] [--pid-file F]   (as root:
    the slurmkit-agent.service that `slurmkit install` puts on each node; {cluster}: slurm.conf's ClusterName)

Why: a hook is two Python processes per job per node, and most of each one's CPU is the interpreter's start and
its imports, not the checks (bench/bench_hook_cpu.py). With the agent, the hook's process is an interpreter that
imports nothing and sends one message; the checks run in a fork of this process, which has imported them once.

What a child does is what the hook would do in its own process: the same module's `main()` under the same
`fail_safe`, with the hook's environment (SLURM_*, SLURMKIT_CONFIG, ...) as its whole environment and the hook's
stdin/stdout/stderr (passed over the socket), so its output reaches slurmd as before; its exit code is the
hook's. It runs a hook only once its client has said "go" (client.py's two steps: a request read after its
answer-by time, from an agent that was stopped, is dropped, never run twice) and stops itself just before the
hook's time (slurm.conf's hook timeout) is up; having answered, it may take the next hook of a burst (`child`).
The agent never decides anything: it has no state a verdict could depend on (the settings, the kernel-log cursor,
the pending drains are files the child reads, as the hook does), and the client runs the hook itself whenever
the agent is absent, refuses, breaks or is late.

The socket is root's only: its directory 0700, the socket 0600, and each connection's peer must be this
process's user (SO_PEERCRED). The agent itself runs no check, holds no lock and starts no thread: a fork of it is
as safe as a fresh process. It re-executes itself when slurmkit's files change under it (an upgrade), and its
waiting children leave, so no new hook runs old code against new files. What it did (hooks served, requests
dropped, its last error) goes to a status file beside the socket, for `slurmkit agent status` (slurmkit/agent/status.py).
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import socket
import stat
import struct
import sys
import time
from typing import NamedTuple

from . import client
from . import status as agent_status
from ..files import atomic_write, publish

HOOKS = ("slurmkit.hooks.prolog", "slurmkit.hooks.epilog")  # the only modules a client may ask for
IDLE_SECONDS = 3.0  # a child that served a hook waits this long for another (a burst of jobs), then exits
HOOKS_PER_CHILD = 32  # and serves at most this many (the hooks run with the collector off: what they leave stays)
# A child shows the hook it runs as its command line (proc.set_title, over this process's argument area), so ps and
# pgrep -f see "slurmkit.hooks.prolog job N" as without the agent: the agent runs with this much room at the end of
# its own command line, so that title fits.
TITLE_ROOM = 2048


def warm() -> None:
    """Import what the hooks import and read their data tables, once, here: a child then starts with it."""
    import importlib

    from ..health import checks

    for name in (
        "slurmkit.hooks.prolog",
        "slurmkit.hooks.epilog",
        "slurmkit.nodesettings",
        "slurmkit.settings",
        "slurmkit.config",  # with PyYAML: a child that finds the settings file stale parses without importing
        "slurmkit.drain",
        "slurmkit.healthlog",
        "slurmkit.health.runner",
        "slurmkit.health.kernlog",
        "slurmkit.health.kernlog.policy",
        "slurmkit.efficiency.hooks",
        "slurmkit.efficiency.sampler",
        "slurmkit.efficiency.record",
        "slurmkit.efficiency.mfu",
        "slurmkit.efficiency.verdict",
        "slurmkit.checkpoint.patterns",
        "slurmkit.checkpoint.jobstate",
        "slurmkit.checkpoint.epilog",
        "slurmkit.checkpoint.sync",
        "slurmkit.slurm",
        "subprocess",
        "json",
    ):
        importlib.import_module(name)
    for name in checks.ORDER:
        importlib.import_module(f"slurmkit.health.checks.{name}")
    from ..health import nvml

    if nvml.unavailable() is None:
        # nvidia-ml-py (health.gpu_source): imported once here; NVML itself is initialised in each child, never
        # here: its state (the driver's handles, its threads) does not survive a fork, and this process starts none
        importlib.import_module("pynvml")
    # the kernel-log check's data, read on first use: the anchors table, the signatures, the Xid catalog
    from ..health.kernlog import anchors, events, policy, signatures

    anchors.table()
    signatures.builtin()
    policy.catalog()
    events.builtin_keywords()
    for rx in events.builtin_patterns():
        anchors.needles(rx)


def prime_settings() -> None:
    """Load the site config the hooks will read (SLURMKIT_CONFIG of the agent's environment, else the default),
    from install's settings file (nodesettings.py) or the YAML: a config that does not load is left to the hooks,
    which report it as they always do."""
    from ..nodesettings import load

    try:
        load()
    except Exception:  # noqa: BLE001 - the hooks say what is wrong with it
        pass


def code_stamp() -> tuple:
    """What says slurmkit changed on disk: the size and mtime of each of its loaded modules and data files."""
    files = [getattr(m, "__file__", None) for n, m in sorted(sys.modules.items()) if n.startswith("slurmkit")]
    data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
    try:
        files += sorted(os.path.join(data, n) for n in os.listdir(data))
    except OSError:
        pass
    out: list[tuple[str, int | None, int | None]] = []
    for f in files:
        if f:
            try:
                st = os.stat(f)
                out.append((f, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append((f, None, None))
    return tuple(out)


def listen(path: str, replace: bool = False) -> socket.socket:
    """A SOCK_SEQPACKET socket at path, reachable by this user only (dir 0700, socket 0600); an old socket there
    is replaced, a live agent's refused (`replace`: taken over, as this agent does when it re-executes itself:
    its children may still hold the old one for the hook they are running)."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise SystemExit(f"slurmkit agent: {d} must be a directory of uid {os.geteuid()} with mode 0700")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.settimeout(1)
        if not replace:
            probe.connect(path)
            raise SystemExit(f"slurmkit agent: another agent answers on {path}")
    except OSError:
        pass
    finally:
        probe.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tmp = f"{path}.{os.getpid()}.tmp"
    old = os.umask(0o177)
    try:
        s.bind(tmp)
    finally:
        os.umask(old)
    publish(tmp, path)  # the socket bound beside it, renamed into place: a client never meets a half-made one
    s.listen(128)
    return s


class Request(NamedTuple):
    module: str
    umask: int
    cwd: bytes
    env: dict[str, str]
    answer_by: int  # monotonic ns: a child that has not said "start" by then must not run the hook
    run_until: int  # monotonic ns: the hook's end (the child's alarm)


def parse_request(data: bytes) -> Request | None:
    """A client's message (client.request), or None: not a hook request."""
    parts = data.split(b"\0")
    if len(parts) < 6 or parts[0] != client.MAGIC:
        return None
    module = parts[1].decode("ascii", "replace")
    if module not in HOOKS:
        return None
    try:
        umask = int(parts[2], 8)
    except ValueError:
        return None
    if not 0 <= umask <= 0o777 or not parts[4].isdigit() or not parts[5].isdigit():
        return None
    env: dict[str, str] = {}
    for kv in parts[6:]:
        k, sep, v = kv.partition(b"=")
        if sep and k:
            env[os.fsdecode(k)] = os.fsdecode(v)
    return Request(module, umask, parts[3], env, int(parts[4]), int(parts[5]))


def _fds(anc) -> list[int]:
    fds: list[int] = []
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(blob) // 4
            fds.extend(struct.unpack(f"{n}i", blob[: n * 4]))
    return fds


def read_message(conn: socket.socket) -> bytes | None:
    """The client's message, or None: cut short. Descriptors never come with it (any that do are closed): they
    come with the client's "go", so that nothing which accepts on the socket and never answers holds the hook's
    stdout (slurmd reads a hook's output to its end)."""
    data, anc, flags, _ = conn.recvmsg(client.MAX_REQUEST + 1, socket.CMSG_SPACE(3 * 4))
    for fd in _fds(anc):
        os.close(fd)
    return data if not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) else None


def read_request(conn: socket.socket) -> Request | None:
    """The client's request, or None: not a hook request, or cut short."""
    data = read_message(conn)
    return parse_request(data) if data is not None else None


# the agent's pid, and the pipe its children report to (b"s": a hook served, b"d": a request dropped, b"e TEXT":
# an error; status.py apply_events): what `slurmkit agent status` shows
_agent_pid = 0
_events = -1


def _event(line: bytes) -> None:
    if _events >= 0:
        try:
            os.write(_events, line[:500] + b"\n")  # one write under PIPE_BUF: whole; a full pipe drops it
        except OSError:
            pass


def _client_says_go(conn: socket.socket, answer_by: int) -> list[int] | None:
    """Tell the client this child runs its hook ("start <pid>") and wait for its "go", which brings the hook's
    stdin/stdout/stderr: only a client that is still waiting answers, and from then on it waits for this child's
    exit code instead of running the hook itself. None (and nothing kept): no "go" with exactly three descriptors."""
    try:
        conn.send(b"start %d" % os.getpid())
        conn.settimeout(max(0.1, (answer_by - time.monotonic_ns()) / 1e9 + 1))
        data, anc, flags, _ = conn.recvmsg(16, socket.CMSG_SPACE(3 * 4))
    except OSError:
        return None
    fds = _fds(anc)
    if data == b"go" and len(fds) == 3 and not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        return fds
    for fd in fds:
        os.close(fd)
    return None


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def run_one(conn: socket.socket, logfd: int) -> bool:
    """In a child: read one request, become the hook's process, run its main(), answer. True when this child may
    take another request (it answered, and no thread of the hook's is left running)."""
    t0 = time.monotonic()
    me0, tools0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        conn.settimeout(10)
        data = read_message(conn) if peer_uid(conn) == os.geteuid() else None
        if data == client.MAGIC + b"\0" + client.STATUS:  # `slurmkit agent status`: are you there?
            conn.send(b"agent %d" % (_agent_pid or os.getppid()))
            return True
        req = parse_request(data) if data is not None else None
        if req is None:
            conn.send(b"fallback")
            return True
        module, umask, cwd, env, answer_by, run_until = req
        late = (time.monotonic_ns() - answer_by) / 1e9 + client.LATE
        fds = _client_says_go(conn, answer_by) if late <= 0 else None
        if fds is None:
            # the client has gone (or is going) to run the hook itself: running it here too would run it twice
            what = f"{late:.1f} s past its answer-by time" if late > 0 else "no go from the client"
            line = f"slurmkit agent: dropped the {module.rsplit('.', 1)[1]} of job {env.get('SLURM_JOB_ID', '-')}"
            os.write(logfd, f"{line}: {what}; not run here, pid {os.getpid()}\n".encode())
            _event(b"d")
            return True
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        # SIGALRM's default action ends this child just before the hook's time is up; the client then runs it
        signal.alarm(max(1, int((run_until - time.monotonic_ns()) / 1e9)))
        os.umask(umask)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [module]
        from .. import proc

        # ps shows the hook, as without the agent (and so do the processes it forks: the sync's child as the user)
        proc.set_title([sys.executable, "-m", module, "job", env.get("SLURM_JOB_ID", "-"), "(slurmkit agent)"])
        from ..hooks.common import fail_safe

        profile = module.rsplit(".", 1)[1]
        code = fail_safe(profile, sys.modules[module].main)
        code = code if isinstance(code, int) and 0 <= code <= 255 else 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # the hook's descriptors go before the answer: slurmd reads a hook's output to its end, and this process
        # outlives the hook (it may take the next one)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        signal.alarm(0)
        proc.set_title([sys.executable, "-m", "slurmkit.agent.server", "child", "(waiting for a hook)"])
        me, tools = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = me.ru_utime + me.ru_stime - me0.ru_utime - me0.ru_stime
        tcpu = tools.ru_utime + tools.ru_stime - tools0.ru_utime - tools0.ru_stime
        line = (
            f"slurmkit agent: {profile} job {env.get('SLURM_JOB_ID', '-')} node {env.get('SLURMD_NODENAME', '-')}:"
            f" exit {code}, {time.monotonic() - t0:.3f} s, cpu {cpu:.3f} s (+{tcpu:.3f} s in tools), pid {os.getpid()}\n"
        )
        os.write(logfd, line.encode())  # before the answer: whoever reads the agent's log after the hook finds it
        conn.send(b"rc %d" % code)
        _event(b"s")
    except BaseException as e:  # noqa: BLE001 - no answer: the client runs the hook itself; this child takes no other
        _event(f"e child {os.getpid()}: {type(e).__name__}: {e}".encode(errors="replace"))
        return False
    finally:
        conn.close()
    import threading

    return threading.active_count() == 1


def next_request(listener: socket.socket, gen: int, idle: float) -> socket.socket | None:
    """The next connection this child wins within `idle` seconds, or None: none came, or the agent that forked it
    is gone or re-executed itself (its end of the `gen` pipe closed: this child's code may be old)."""
    import select

    poller = select.poll()
    poller.register(listener.fileno(), select.POLLIN)
    poller.register(gen, select.POLLIN)
    deadline = time.monotonic() + idle
    while (left := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(left * 1000):
            if fd == gen:
                return None
            try:
                conn, _ = listener.accept()
                return conn
            except (BlockingIOError, InterruptedError):
                pass  # another child (or the agent) took it
    return None


def child(listener: socket.socket, gen: int, logfd: int, conn: socket.socket) -> None:
    """A forked child: the hook it was forked for, then, while a burst lasts, the next ones it wins. A child that
    has served one hook skips the copy-on-write faults a fresh fork pays (about half a hook's CPU here). It stays at
    most IDLE_SECONDS without a hook and for at most HOOKS_PER_CHILD hooks; every hook resets what it set (its
    environment, descriptors, umask, directory, signals, alarm). Never returns."""
    served = 0
    nxt: socket.socket | None = conn
    while nxt is not None and run_one(nxt, logfd):
        served += 1
        reap()  # an efficiency sampler a prolog forked here, once the epilog has stopped it
        if served >= HOOKS_PER_CHILD:
            break
        nxt = next_request(listener, gen, IDLE_SECONDS)
    os._exit(0)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(path: str, pid_file: str | None = None, replace: bool = False) -> int:
    global _agent_pid, _events
    warm()
    prime_settings()
    stamp = code_stamp()
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # before the pid file: a stop right after it is clean
    s = listen(path, replace)
    ino = os.lstat(path).st_ino
    _agent_pid = os.getpid()
    status = agent_status.StatusFile(path, _agent_pid, replace)  # before the pid file: whoever waits on it finds both
    if pid_file:
        atomic_write(pid_file, f"{os.getpid()}\n")
    gc.collect()
    gc.freeze()  # what the imports made stays put: the children's pages are shared, not copied by the collector
    s.setblocking(False)
    # the children hold the read end: it closes (POLLHUP) when this process exits or re-executes itself
    gen_r, gen_w = os.pipe()
    ev_r, _events = os.pipe()
    os.set_blocking(ev_r, False)
    os.set_blocking(_events, False)
    logfd = os.dup(2)  # the agent's own log: a child's stderr is its client's
    print(f"slurmkit agent: serving {', '.join(HOOKS)} on {path} (pid {os.getpid()})", file=sys.stderr, flush=True)
    import select

    poller = select.poll()
    poller.register(s.fileno(), select.POLLIN)
    poller.register(ev_r, select.POLLIN)
    checked = time.monotonic()
    while not stop:
        conn = None
        ready = {fd for fd, _ in poller.poll(1000)}
        status.feed(ev_r if ev_r in ready else -1)
        if s.fileno() in ready:
            time.sleep(0.002)  # an idle child (warm) takes a new hook first; a fork is the fallback
            try:
                conn, _ = s.accept()
            except (BlockingIOError, InterruptedError):
                conn = None
            except OSError:
                conn = None
        if conn is not None:
            pid = os.fork()
            if pid == 0:
                os.close(gen_w)
                os.close(ev_r)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                child(s, gen_r, logfd, conn)
            conn.close()
        reap()
        if time.monotonic() - checked > 5:
            checked = time.monotonic()
            prime_settings()
            if code_stamp() != stamp:
                print("slurmkit agent: slurmkit changed on disk: restarting", file=sys.stderr, flush=True)
                s.close()
                argv = [a for a in sys.orig_argv[1:] if a != "--replace"]
                os.execv(sys.executable, [sys.executable, *argv, "--replace"])
            try:
                if os.lstat(path).st_ino != ino:
                    break  # another agent took the path over: leave it to that one
            except OSError:
                break  # the socket was removed: stop (systemd restarts a wanted agent)
    s.close()
    try:
        if os.lstat(path).st_ino == ino:
            os.unlink(path)
            os.unlink(agent_status.status_path(path))
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="slurmkit-agent", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--socket",
        default=os.environ.get("SLURMKIT_AGENT_SOCKET") or client.DEFAULT_SOCKET,
        help="its socket; {cluster} is slurm.conf's ClusterName (default: %(default)s)",
    )
    ap.add_argument("--pid-file", help="write the agent's pid here once it serves")
    ap.add_argument("--title-room", default="", help=argparse.SUPPRESS)
    ap.add_argument("--replace", action="store_true", help=argparse.SUPPRESS)  # its own restart: take the socket over
    a = ap.parse_args(argv)
    if len(a.title_room) < TITLE_ROOM:
        # room for a child's title (see TITLE_ROOM): run again with it, once
        args = [x for x in sys.orig_argv[1:] if not x.startswith("--title-room")]
        os.execv(sys.executable, [sys.executable, *args, "--title-room=" + " " * TITLE_ROOM])
    from ..nodeconf import slurm_conf

    path = os.fsdecode(client.expand_socket(os.fsencode(a.socket), slurm_conf(os.environb)))
    return serve(path, a.pid_file, a.replace)


if __name__ == "__main__":
    sys.exit(main())
