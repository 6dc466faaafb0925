"""As whom: the job's identity, and a forked child that drops to it before touching any user path."""

from __future__ import annotations

import json
import gc
import os
import pwd
import select
import signal
import time
from ..record import Record
from typing import TYPE_CHECKING

from ..signals import signame
from .report import SyncError, SyncReport

if TYPE_CHECKING:
    from ..settings import SyncSettings


def job_identity(environ: dict[str, str], allow_root: bool = False) -> tuple[int, int, str]:
    """(uid, gid, user) of the job from Slurm's variables, cross-checked against the passwd database."""
    try:
        uid = int(environ["SLURM_JOB_UID"])
    except (KeyError, ValueError):
        raise SyncError("SLURM_JOB_UID is missing or not a number") from None
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise SyncError(f"uid {uid} is not a known user") from None
    user = environ.get("SLURM_JOB_USER") or pw.pw_name
    if user != pw.pw_name:
        raise SyncError(f"SLURM_JOB_USER={user!r} is not uid {uid} ({pw.pw_name})")
    gid_s = environ.get("SLURM_JOB_GID")
    gid = int(gid_s) if gid_s and gid_s.isdigit() else pw.pw_gid
    if uid == 0 and not allow_root:
        raise SyncError("refusing to sync a root job's checkpoints as root")
    return uid, gid, user


def drop_privileges(uid: int, gid: int, user: str) -> None:
    groups = os.getgrouplist(user, gid)
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise SyncError("privilege drop failed: could regain root")
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != gid:
        raise SyncError("privilege drop failed")


def preload(dest: str, settings: SyncSettings | None = None) -> None:
    """Import (and set up) everything the dropped child needs while it is still root: after the drop, the
    interpreter's own files may be unreadable (a Python under /root), and root never reads user files anyway."""
    import concurrent.futures.thread  # noqa: F401
    import ctypes  # noqa: F401 - syncfs

    import yaml  # noqa: F401 - the job file

    from .. import config  # noqa: F401
    from . import engine, fsdest, jobfile, selection, syncdir  # noqa: F401 - what the child runs

    if dest.startswith("s3://"):
        from . import s3

        s3.client(settings)


REAP_GRACE = 0.5  # seconds a child killed at its deadline gets to die before it is left to die on its own


def run_as(
    identity: tuple[int, int, str] | None,
    fn,
    *args,
    timeout: float | None = None,
    before=None,
    grace: float = REAP_GRACE,
    **kw,
) -> SyncReport:
    """Run fn(*args, **kw) -> dict in a forked child as `identity` (uid, gid, user); None = as we are, in this
    process. `before()` runs in the child before the drop (imports). The child is killed (SIGKILL) at `timeout`
    seconds if it has not answered, and this returns by timeout + grace even when it cannot die (collect)."""
    if identity is None:
        if before:
            before()
        return _report(fn(*args, **kw))
    uid, gid, user = identity
    if os.geteuid() != 0 and os.geteuid() != uid:
        raise SyncError(f"only root can sync as another user ({user})")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            # first: the caller's stdin/stdout/stderr are slurmd's pipes, and slurmd waits for them to close; a
            # child asleep in the kernel on a hung destination must not hold them past the epilog's own exit
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(null)
            gc.enable()  # the hooks run with it off (hooks.common.fail_safe); a sync may copy for minutes
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if before:
                before()
            if os.geteuid() == 0:
                drop_privileges(uid, gid, user)
            os.environ["HOME"] = _home(uid)
            os.environ["USER"] = os.environ["LOGNAME"] = user
            out = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 - the child reports everything, then exits
            out = {"errors": [f"{type(e).__name__}: {e}"], "status": "failed"}
            code = 1
        try:
            data = json.dumps(out.as_dict() if isinstance(out, SyncReport) else out, default=str).encode()
            while data:
                data = data[os.write(w, data) :]
        finally:
            os._exit(code)
    os.close(w)
    try:
        end = (time.monotonic() + timeout) if timeout else None
        return _report(outcome(collect(pid, r, end, grace)))
    finally:
        os.close(r)


class Collected(Record, kw_only=False):
    """What the parent saw of its sync child: the report bytes, the wait status (None: not reaped, it is still
    there), whether it was killed at the deadline, and what /proc said of it when it would not stop ("D
    (percpu_rwsem_wait)": asleep in the kernel, uninterruptibly; "" when none of its threads was)."""

    data: bytes
    wstatus: int | None
    killed: bool
    stuck: str


def collect(pid: int, r: int, end: float | None, grace: float, *, waitpid=os.waitpid, kill=os.kill) -> Collected:
    """Read the child's report from `r` until it closes or the deadline `end` (monotonic; None: no deadline), then
    reap it. At `end` the child is killed (SIGKILL) and given `grace` seconds to die; past that it is left where it
    is, never waited for: a child asleep in the kernel on a frozen or hung filesystem (D state) does not die of
    SIGKILL until the filesystem answers, and waiting for it would hold the epilog for as long as the hang lasts.
    It dies when the kernel lets it go, and init reaps it once the epilog has exited. So this returns by
    end + grace, whatever the child does. waitpid and kill are parameters for the tests."""
    chunks, killed, stuck = [], False, ""
    while True:
        wait = None if end is None else max(0.0, end - time.monotonic())
        ready, _, _ = select.select([r], [], [], wait)
        if not ready:
            stuck = kernel_sleep(pid)  # before the kill: what it was waiting for
            kill(pid, signal.SIGKILL)
            killed = True
            break
        b = os.read(r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    until = None if end is None else max(end, time.monotonic()) + grace
    wstatus = _reap(pid, until, waitpid)
    if wstatus is None:
        stuck = stuck or kernel_sleep(pid) or "not reaped"
    return Collected(b"".join(chunks), wstatus, killed, stuck)


def _reap(pid: int, until: float | None, waitpid) -> int | None:
    """The child's wait status, waiting until `until` at most (None: as long as it takes); None if it is still
    there then."""
    delay = 0.002
    while True:
        try:
            got, wstatus = waitpid(pid, 0 if until is None else os.WNOHANG)
        except ChildProcessError:
            return None
        if got:
            return wstatus
        left = until - time.monotonic() if until is not None else 0.0
        if left <= 0:
            return None
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)


def kernel_sleep(pid: int | str) -> str:
    """ "D (<wchan>)" when a thread of `pid` is in uninterruptible sleep (waiting in the kernel: I/O that does not
    answer), else ""."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return ""
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read(4096)
            with open(f"/proc/{pid}/task/{tid}/wchan", "rb") as f:
                wchan = f.read(256).decode("ascii", "replace").strip()
        except OSError:
            continue
        if thread_state(stat) == "D":
            return f"D ({wchan})" if wchan and wchan != "0" else "D"
    return ""


def thread_state(stat: bytes) -> str:
    """The state letter of a /proc/PID/stat line (field 3: after the last ')', since the name may hold one)."""
    i = stat.rfind(b")")
    return stat[i + 2 : i + 3].decode("ascii", "replace") if i >= 0 else ""


NOT_ANSWERING = "destination not answering"


def outcome(c: Collected) -> dict:
    """The report for what collect() saw (pure). A child killed at the deadline that was asleep in the kernel or
    would not die is a destination that does not answer: partial, everything deferred, and `hung` says so."""
    if c.killed:
        rep: dict = {"status": "partial", "errors": [], "killed": True, "deferred": ["*"]}
        if c.stuck:
            rep.update(hung=NOT_ANSWERING, child_state=c.stuck)
        return rep
    if c.wstatus is not None and os.WIFSIGNALED(c.wstatus):
        # killed by someone else (the OOM killer, an admin, a hung-task watchdog): a failure with its signal,
        # and the checkpoints it had not published are left for the background or manual finish
        sig = os.WTERMSIG(c.wstatus)
        name = signame(sig, unknown=f"signal {sig}")
        return {"status": "failed", "errors": [f"sync child killed by {name}"], "deferred": ["*"], "child_signal": name}
    if not c.data:
        code = "?" if c.wstatus is None else os.waitstatus_to_exitcode(c.wstatus)
        return {"status": "failed", "errors": [f"sync child exited {code} without a report"], "deferred": ["*"]}
    try:
        return json.loads(c.data)
    except ValueError:
        return {"status": "failed", "errors": ["sync child died without a report"], "deferred": ["*"]}


def _report(out: SyncReport | dict) -> SyncReport:
    return out if isinstance(out, SyncReport) else SyncReport.from_dict(out)


def _home(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"
