"""As whom: the job's identity, and a forked child that drops to it before touching any user path."""

from __future__ import annotations

import json
import gc
import os
import pwd
import select
import signal
import time
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
    import dataclasses  # noqa: F401

    import yaml  # noqa: F401 - the job file

    from .. import config  # noqa: F401
    from . import engine, fsdest, jobfile, selection, syncdir  # noqa: F401 - what the child runs

    if dest.startswith("s3://"):
        from . import s3

        s3.client(settings)


def run_as(
    identity: tuple[int, int, str] | None, fn, *args, timeout: float | None = None, before=None, **kw
) -> SyncReport:
    """Run fn(*args, **kw) -> dict in a forked child as `identity` (uid, gid, user); None = as we are, in this
    process. `before()` runs in the child before the drop (imports). The child dies at `timeout` seconds
    (SIGKILL) if it has not answered."""
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
    chunks, end = [], (time.monotonic() + timeout) if timeout else None
    killed = False
    try:
        while True:
            wait = None if end is None else max(0.0, end - time.monotonic())
            ready, _, _ = select.select([r], [], [], wait)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            b = os.read(r, 1 << 16)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(r)
        _, wstatus = os.waitpid(pid, 0)
    if killed:
        return _report({"status": "partial", "errors": [], "killed": True, "deferred": ["*"]})
    if os.WIFSIGNALED(wstatus):
        # killed by someone else (the OOM killer, an admin, a hung-task watchdog): a failure with its signal,
        # and the checkpoints it had not published are left for the background or manual finish
        sig = os.WTERMSIG(wstatus)
        name = signame(sig, unknown=f"signal {sig}")
        return _report(
            {"status": "failed", "errors": [f"sync child killed by {name}"], "deferred": ["*"], "child_signal": name}
        )
    data = b"".join(chunks)
    if not data:
        return _report(
            {
                "status": "failed",
                "errors": [f"sync child exited {os.waitstatus_to_exitcode(wstatus)} without a report"],
                "deferred": ["*"],
            }
        )
    try:
        return _report(json.loads(data))
    except ValueError:
        return _report({"status": "failed", "errors": ["sync child died without a report"], "deferred": ["*"]})


def _report(out: SyncReport | dict) -> SyncReport:
    return out if isinstance(out, SyncReport) else SyncReport.from_dict(out)


def _home(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"
