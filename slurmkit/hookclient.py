"""The prolog's and epilog's first step: hand the hook to the node's hook agent (slurmkit/hooks/agent.py), if one
runs, and exit with its answer; else return None, and the hook runs in this process as before.

The agent forks, from an interpreter that has already imported slurmkit's hook code, a child that runs exactly the
hook this process would run: the same module's `main()`, with this process's environment, umask, working
directory and standard streams (passed over the socket), and its exit code is this process's. What a job saves is
this interpreter's imports (most of a hook's CPU). It is an optimisation only: no socket, a refused or broken
connection, an agent that answers "run it yourself", or no answer in time, and the caller runs the hook itself.
The verdict never depends on whether the agent runs.

Only builtin modules (`_socket`, `posix`, `sys`) are imported here, and it lives outside slurmkit/hooks/ so that
importing it runs no package __init__ but slurmkit's own (which imports nothing): this runs first, on every job,
and when the agent answers, nothing else is imported at all.
"""

import posix
import sys

DEFAULT_SOCKET = "/run/slurmkit/agent.sock"
MAGIC = b"slurmkit-hook/1"
MAX_REQUEST = 64 * 1024  # a Slurm hook's environment is a few KiB; a larger one runs in process
# The agent's child ends itself (SIGALRM) after CHILD_LIMIT seconds; the client waits a little longer for its
# answer, then runs the hook itself. A hook's own work is bounded far below this (health.budget_seconds, each
# tool's command_timeout, sync.budget), so the limit only catches an agent that broke.
CHILD_LIMIT = 240
REPLY_TIMEOUT = CHILD_LIMIT + 10
CONNECT_TIMEOUT = 2.0


def socket_path(environ) -> bytes:
    """SLURMKIT_AGENT_SOCKET, else the default; empty, "none" or "off" turns the agent off for this hook.
    `environ` is bytes to bytes (posix.environ)."""
    p = environ.get(b"SLURMKIT_AGENT_SOCKET")
    if p is None:
        return DEFAULT_SOCKET.encode()
    return b"" if p.strip().lower() in (b"", b"none", b"off") else p


def request(module: str, environ, umask: int, cwd: bytes) -> bytes:
    """The one message a hook sends: MAGIC, the hook's module, its umask (octal), its working directory, then its
    environment as KEY=VALUE, NUL-separated (bytes throughout: no decoding on this side)."""
    env = b"\0".join(k + b"=" + v for k, v in environ.items())
    return b"\0".join((MAGIC, module.encode(), b"%o" % umask, cwd, env))


def parse_reply(data: bytes) -> int | None:
    """b"rc N" -> N (0-255); anything else (b"fallback": the agent will not run it; b"": it broke) -> None."""
    if data.startswith(b"rc ") and data[3:].isdigit() and len(data) <= 6:
        n = int(data[3:])
        if n <= 255 and data == b"rc %d" % n:
            return n
    return None


def delegate(module: str) -> int | None:
    """Ask the agent to run `module`'s hook for this process: its exit code, or None (run it here)."""
    environ = posix.environ
    path = socket_path(environ)
    if not path:
        return None
    try:
        import _socket
    except ImportError:
        return None
    umask = posix.umask(0o022)
    posix.umask(umask)
    try:
        cwd = posix.getcwdb()
    except OSError:
        cwd = b"/"
    msg = request(module, environ, umask, cwd)
    if len(msg) > MAX_REQUEST:
        return None
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        s.settimeout(CONNECT_TIMEOUT)
        s.connect(path)
        fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
        s.sendmsg([msg], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        s.settimeout(REPLY_TIMEOUT)
        return parse_reply(s.recv(64))
    except OSError:  # no agent (the usual case where none is installed), or it broke: run in process
        return None
    finally:
        s.close()
