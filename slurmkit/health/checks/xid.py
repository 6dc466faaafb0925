"""xid: NVIDIA Xid and NVSwitch SXid events from the kernel log, graded by the Xid catalog
(slurmkit/data/xid_catalog.json). Live, only events new since the last prolog/epilog on this node count (a small
state file under paths.state_dir), so an old Xid does not drain a node forever. The mark moves only when a hook
calls the result's `commit` after acting on the verdict; `slurmkit check` reads without moving it. A captured
file is graded whole."""
from __future__ import annotations

import json
import os

from .. import kernlog
from ..base import Result, worst

NAME = "xid"


def _reason(v: kernlog.Verdict) -> str:
    if v.code == 79 and v.kind in ("xid", "offbus"):
        return f"GPU {v.pci} fell off the bus"
    if v.kind == "sxid":
        return f"NVSwitch {v.pci} SXid {v.code}: {v.event.message[:60]}"
    return f"GPU {v.pci} {v.name}"


def evaluate(events: list, all_events: list, s, *, total_events=None, live: bool = True) -> Result:
    verdicts = kernlog.grade_all(events, fatal_extra=s.fatal_extra, ignore=s.ignore, unknown_status=s.unknown_status)
    ev = {"events": [dict(e.to_dict(), status=v.status, name=v.name, action=v.action, why=v.why)
                     for e, v in zip(events, verdicts)][:50],
          "new_events": len(events), "events_in_log": total_events if total_events is not None else len(all_events)}
    if not verdicts:
        return Result(NAME, "ok", "no new Xid events" if live else "no Xid events", ev)
    status = worst(v.status for v in verdicts)
    if status == "ok":
        return Result(NAME, "ok", f"{len(verdicts)} Xid events, none that matters", ev)
    top = next(v for v in verdicts if v.status == status)
    if status == "fail":
        # the evidence an admin needs first: the line that failed, verbatim
        ev["line"] = top.event.line
    code = f"{'sxid' if top.kind == 'sxid' else 'xid'}{top.code}"
    others = sorted({f"{'sxid' if v.kind == 'sxid' else 'xid'}{v.code}" for v in verdicts if v.status != "ok"}
                    - {code})
    reason = _reason(top) + (f" (also {', '.join(others)})" if others else "")
    return Result(NAME, status, reason, ev, code=code if status == "fail" else "")


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def read_from(path: str, mark: dict | None) -> tuple[str, dict]:
    """The part of a log file after `mark` ({"ino", "offset"}), up to its last complete line, and the new mark.
    A rotated (other inode) or truncated (shorter) file is read from its start."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        start = 0
        if mark and mark.get("ino") == st.st_ino and 0 <= int(mark.get("offset", 0)) <= st.st_size:
            start = int(mark["offset"])
        f.seek(start)
        data = f.read()
    end = data.rfind(b"\n") + 1          # a line still being written is read next time
    return data[:end].decode("utf-8", "replace"), {"path": path, "ino": st.st_ino, "offset": start + end}


def run(ctx) -> Result:
    s = ctx.settings.xid
    path = ctx.state_path("xid")
    state: dict = {}
    if ctx.live:
        try:
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
        except (OSError, ValueError):
            state = {}
    if ctx.live and getattr(s, "log_file", None) and NAME not in ctx.captures:
        # a log file: read only what was appended since the last hook; everything read is new
        text, mark = read_from(s.log_file, state.get("file"))
        events = kernlog.parse(text)
        res = evaluate(events, events, s)
        return _deferred(res, path, state, dict(state, file=mark))
    text = ctx.text(NAME, "dmesg")
    events = kernlog.parse(text)
    if not ctx.live:
        return evaluate(events, events, s, live=False)
    boot = _boot_id()
    new = kernlog.new_events(events, state, boot)
    res = evaluate(new, events, s)
    return _deferred(res, path, state, kernlog.next_state(events, boot))


def _deferred(res: Result, path: str, state: dict, nxt: dict) -> Result:
    """Attach the mark move to the result instead of making it: only a hook that acted on the verdict calls
    `res.commit()` (`slurmkit check` never does), so an Xid whose drain failed stays new for the next run."""
    if nxt != state:
        res.commit = lambda: _save(path, nxt)
    return res


def _save(path: str, state: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)
