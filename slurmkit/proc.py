"""The one place that runs external commands.

Every call takes an argv list (never a shell string), has a timeout, and captures output. A command that hangs
past its timeout is killed with its whole process group; one that cannot be killed (a process stuck in the kernel,
as nvidia-smi is on a GPU that fell off the bus) is abandoned after a short grace period, so the caller never hangs.

Light on purpose: the prolog imports this.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from .record import Record

from .errors import CommandError

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import IO

# Slurm runs prolog/epilog with no PATH at all; look where the tools live on Debian/RHEL.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KILL_GRACE = 1.0


class Result(Record, frozen=True, kw_only=False):
    """What a command did: here (run), or on a node over SSH (install.ssh.RunResult adds check())."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0  # 0: not timed (a remote command)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def tool(value: str | list[str], *args: str) -> list[str]:
    """The argv for a configured tool (config `tools.*`): a path is one argument (never split), a list is an
    argv prefix (a wrapper such as `env VAR=x /path`); the tool's own arguments follow."""
    return [value, *args] if isinstance(value, str) else [*value, *args]


def _env(env: dict[str, str] | None) -> dict[str, str]:
    base = dict(os.environ if env is None else env)
    if not base.get("PATH"):
        base["PATH"] = DEFAULT_PATH
    return base


def run(
    argv: list[str] | tuple[str, ...],
    *,
    timeout: float,
    input: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    as_user: tuple[int, int, list[int]] | None = None,
) -> Result:
    """Run argv; return its Result, or raise CommandError (missing binary, timeout, non-zero exit with check).
    `as_user` (uid, gid, groups): the child drops to that identity before it execs (root only; a caller of that
    very uid runs it as itself)."""
    if isinstance(argv, str):  # a programming error, not a user one: never hand a string to a shell
        raise TypeError("proc.run takes an argv list, not a string")
    argv = [str(a) for a in argv]
    name = argv[0]
    ident: dict = {}
    if as_user is not None:
        uid, gid, groups = as_user
        if os.geteuid() == 0:
            ident = {"user": uid, "group": gid, "extra_groups": list(groups)}
        elif uid != os.geteuid():
            raise CommandError(f"{name}: cannot run as uid {uid} without root", argv=argv)
    start = time.monotonic()
    try:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=_env(env),
            cwd=cwd,
            start_new_session=True,
            **ident,
        )
    except FileNotFoundError:
        path = _env(env)["PATH"]
        raise CommandError(f"{name}: command not found (PATH={path})", argv=argv, missing=True) from None
    except PermissionError as e:
        raise CommandError(f"{name}: cannot execute: {e.strerror}", argv=argv, missing=True) from None
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = _kill(p)
        raise CommandError(
            f"{name}: timed out after {timeout:g}s", argv=argv, stdout=out, stderr=err, timed_out=True
        ) from None
    res = Result(tuple(argv), p.returncode, out or "", err or "", time.monotonic() - start)
    if check and p.returncode != 0:
        detail = (err or out or "").strip().splitlines()
        last = detail[-1] if detail else f"exit code {p.returncode}"
        raise CommandError(f"{name}: {last}", argv=argv, returncode=p.returncode, stdout=res.stdout, stderr=res.stderr)
    return res


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid runs (ours or another user's); a zombie (exited, not yet reaped) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read(4096).rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")  # gone between the two looks; without /proc kill(0) said yes
    except (OSError, IndexError):
        return True  # unreadable: kill(0) said yes


def _kill(p: subprocess.Popen) -> tuple[str, str]:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        out, err = p.communicate(timeout=KILL_GRACE)
        return out or "", err or ""
    except subprocess.TimeoutExpired:
        # Unkillable (uninterruptible sleep in the driver) or a grandchild holding the pipes: give up on it.
        for f in (p.stdout, p.stderr, p.stdin):
            try:
                if f:
                    f.close()
            except OSError:
                pass
        return "", ""


def spawn_detached(
    argv: list[str] | tuple[str, ...], *, env: dict[str, str] | None = None, log: str | None = None
) -> int:
    """Start argv in its own session, not waited for (it outlives the caller: the epilog's background sync).
    stdin is /dev/null; stdout/stderr go to `log` (appended) or /dev/null. Returns the pid."""
    if isinstance(argv, str):
        raise TypeError("proc.spawn_detached takes an argv list, not a string")
    out: IO[bytes] | int = open(log, "ab") if log else subprocess.DEVNULL
    try:
        p = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=_env(env),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        if not isinstance(out, int):
            out.close()
    return p.pid


def set_title(argv: list[str]) -> bool:
    """Show argv as this process's command line (ps, pgrep -f, /proc/PID/cmdline), as setproctitle does: written
    over the original argument area through /proc/self/mem, padded with NULs and cut to fit, and its first word
    as the process name (/proc/self/comm). Best effort: False when it could not."""
    try:
        fields = stat_fields("self")
        start, end = int(fields[48 - 3]), int(fields[49 - 3])  # arg_start, arg_end
        size = end - start
        new = b"\0".join(a.encode("utf-8", "replace") for a in argv)[: max(0, size - 1)]
        with open("/proc/self/mem", "r+b", buffering=0) as m:
            m.seek(start)
            m.write(new.ljust(size, b"\0"))
        with open("/proc/self/comm", "w", encoding="utf-8") as f:
            f.write(os.path.basename(argv[0])[:15])
        return True
    except (OSError, ValueError, IndexError):
        return False


def stat_fields(pid: int | str) -> list[bytes]:
    """/proc/PID/stat from field 3 (state) on: field N is [N - 3]. The command name (field 2) may hold spaces and
    parentheses, so the split starts after its last ')'. OSError when the process is gone."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read(4096)
    return stat[stat.rindex(b")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot, field 22): with the pid, a process's identity (a pid is
    reused, the pair is not). None when it is gone."""
    try:
        return int(stat_fields(pid)[22 - 3])
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds the process has used (utime + stime, fields 14 and 15). None when it is gone."""
    try:
        fields = stat_fields(pid)
        return (int(fields[14 - 3]) + int(fields[15 - 3])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
