"""dstate: a process stuck in uninterruptible sleep (state D) holding a GPU device open. A GPU or driver that stopped
answering leaves its last job's processes in D state: they cannot be killed, the GPU's memory stays held, and the
next job on the node hangs or fails at CUDA init (gcm's check of D-state processes on /dev/nvidia*).

Live only: it reads /proc (`dstate.proc`), every process's state, and for those in D state their open files; a
process is stuck when it is still in D state, the same process (pid and start time), `dstate.confirm_seconds` later
(a D state that passes is ordinary I/O). Bounded: at most `MAX_PROCS` processes and `MAX_FDS` open files each are
read. A capture cannot show this (ps prints no open files): `--capture dstate` is refused."""

from __future__ import annotations

import os
import time

from ..base import Result
from ..context import NoData

NAME = "dstate"
MAX_PROCS = 200_000
MAX_FDS = 65_536


def _stat(proc: str, pid: str) -> tuple[str, str, int] | None:
    """(state, comm, start time) of /proc/PID/stat; None when the process is gone or the file unreadable."""
    try:
        with open(os.path.join(proc, pid, "stat"), "rb") as f:
            raw = f.read(4096)
        comm = raw[raw.index(b"(") + 1 : raw.rindex(b")")].decode("utf-8", "replace")
        rest = raw[raw.rindex(b")") + 2 :].split()
        return rest[0].decode("ascii", "replace"), comm, int(rest[22 - 3])
    except (OSError, ValueError, IndexError):
        return None


def _devices(proc: str, pid: str, prefixes: list[str]) -> list[str]:
    """The open files of PID under one of the device prefixes (/dev/nvidia0, /dev/nvidiactl, ...), sorted."""
    fd_dir = os.path.join(proc, pid, "fd")
    found: set[str] = set()
    try:
        with os.scandir(fd_dir) as it:
            for n, e in enumerate(it):
                if n >= MAX_FDS:
                    break
                try:
                    target = os.readlink(e.path)
                except OSError:
                    continue
                if any(target.startswith(p) for p in prefixes):
                    found.add(target)
    except OSError:
        return []
    return sorted(found)


def scan(proc: str, prefixes: list[str]) -> tuple[list[dict], int]:
    """([{pid, comm, start, devices}] of the processes in D state holding a device, processes read)."""
    out: list[dict] = []
    n = 0
    try:
        entries = os.scandir(proc)
    except OSError as err:
        raise NoData(f"cannot read {proc}: {err.strerror}") from None
    with entries as it:
        for e in it:
            if not e.name.isdigit():
                continue
            n += 1
            if n > MAX_PROCS:
                break
            st = _stat(proc, e.name)
            if st is None or st[0] != "D":
                continue
            devs = _devices(proc, e.name, prefixes)
            if devs:
                out.append({"pid": int(e.name), "comm": st[1], "start": st[2], "devices": devs})
    return out, n


def confirm(proc: str, first: list[dict]) -> list[dict]:
    """Those of `first` still in D state, the same process (its start time), now."""
    still = []
    for p in first:
        st = _stat(proc, str(p["pid"]))
        if st is not None and st[0] == "D" and st[2] == p["start"]:
            still.append(p)
    return still


def evaluate(stuck: list[dict], read: int, s) -> Result:
    """The verdict over the processes found stuck (pure: `stuck` as scan/confirm return them)."""
    if read == 0:
        raise NoData(f"no process in {s.proc}: not a proc filesystem")
    ev: dict = {"processes_read": read, "stuck": stuck}
    if not stuck:
        return Result(NAME, "ok", f"no process stuck in D state on a GPU device ({read} processes read)", ev)
    what = "; ".join(f"pid {p['pid']} ({p['comm']}) on {', '.join(p['devices'][:3])}" for p in stuck[:5])
    more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
    return Result(NAME, "fail", f"{len(stuck)} process(es) stuck in D state holding a GPU: {what}{more}", ev, code=NAME)


def run(ctx) -> Result:
    if NAME in ctx.captures:
        raise NoData("dstate reads /proc live; there is no capture format for it (ps shows no open files)")
    s = ctx.settings.dstate
    first, read = scan(s.proc, s.devices)
    if first and s.confirm_seconds > 0:
        time.sleep(s.confirm_seconds)
    stuck = confirm(s.proc, first) if first else []
    return evaluate(stuck, read, s)
