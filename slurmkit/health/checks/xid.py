"""xid: the node's kernel-log check. NVIDIA Xid and NVSwitch SXid events graded by the Xid catalog
(slurmkit/data/xid_catalog.json), and GPU failures logged without an Xid line (fallen off the bus, GPU lost,
RmInitAdapter/probe/GSP failures, fatal PCIe AER) graded by slurmkit/data/kernlog_signatures.json. Live, only
events new since the last prolog/epilog on this node are graded (a small state file under paths.state_dir), so an
old warning is not reported twice; the mark moves only when a hook calls the result's `commit` after acting on the
verdict, and `slurmkit check` reads without moving it. A FATAL event stays active for the rest of its boot
(kernlog.sticky): every later live run on that boot fails with it again, even when its drain was lost, until the
boot id changes or an explicit recheck (`slurmkit check --only xid`, as `slurmkit audit resume --recheck` runs it)
finds no fatal event in the whole kernel log. A captured file is graded whole."""

from __future__ import annotations

import json
import os

from .. import kernlog
from ..context import NoData
from ..kernlog import logline, sticky
from ..base import Result, worst
from ...files import atomic_write

NAME = "xid"


def _gpu(v: kernlog.Verdict) -> str:
    if v.kind == "sxid":
        return f"NVSwitch {v.pci}"
    return f"GPU {v.pci}" if v.pci else "GPU (not named in the log)"


def _reason(v: kernlog.Verdict, others: list[str]) -> str:
    """`GPU 0000:3b:00 fell off the bus (also xid_aer); reboot the node`: the GPU, what happened, what else the
    log shows, and what to do."""
    also = f" (also {', '.join(others)})" if others else ""
    src = f" [written by {v.event.source}, not the kernel]" if v.event.source != "kernel" else ""
    todo = f"; {v.todo}" if v.todo and v.todo != "nothing" else ""
    return f"{_gpu(v)} {v.says}{also}{src}{todo}"


def _top(verdicts: list, status: str):
    """The verdict the reason is about: an Xid 154 (the driver's own recovery instruction), then an Xid line, then
    one that names its GPU."""
    cands = [v for v in verdicts if v.status == status]
    return min(cands, key=lambda v: (not (v.kind == "xid" and v.code == 154), v.kind not in ("xid", "sxid"), not v.pci))


def _groups(events: list, verdicts: list) -> list[dict]:
    """One row per (what, GPU, status): a flood of 3,500 identical lines is one row with its count."""
    rows: dict[tuple, dict] = {}
    for e, v in zip(events, verdicts):
        key = (v.tag, v.pci, v.status, e.source)
        r = rows.get(key)
        if r is None:
            rows[key] = {
                "tag": v.tag,
                "gpu": v.pci,
                "status": v.status,
                "count": 1,
                "first": e.line,
                "says": v.says,
                "source": e.source,
            }
        else:
            r["count"] += 1
    return list(rows.values())


def grade(events: list, s) -> list:
    """The verdicts on `events` with the site's policy ([] for none: the policy module is not even loaded)."""
    if not events:
        return []
    return kernlog.grade_all(
        events,
        fatal_extra=s.fatal_extra,
        ignore=s.ignore,
        unknown_status=s.unknown_status,
        userspace=s.userspace,
        extra_signatures=s.signatures_extra,
    )


def evaluate(
    events: list,
    all_events: list,
    s,
    *,
    total_events=None,
    live: bool = True,
    active: list | None = None,
    verdicts: list | None = None,
) -> Result:
    """The verdict on `events` (the new ones, live), and on `active`: the fatal faults kept from earlier runs of this
    boot (kernlog.sticky), which fail the check whatever the new events say. `verdicts`: grade(events, s), when
    the caller has them already."""
    if verdicts is None:
        verdicts = grade(events, s)
    ev = {
        "events": [
            dict(e.to_dict(), status=v.status, name=v.name, action=v.action, why=v.why)
            for e, v in zip(events, verdicts)
        ][:50],
        "groups": _groups(events, verdicts)[:50],
        "new_events": len(events),
        "events_in_log": total_events if total_events is not None else len(all_events),
    }
    if active:
        ev["active_faults"] = active
    if not verdicts and not active:
        return Result(NAME, "ok", "no new kernel-log GPU events" if live else "no kernel-log GPU events", ev)
    status = worst(v.status for v in verdicts)
    if active and status != "fail":
        return _still_active(active, verdicts, ev)
    if status == "ok":
        return Result(NAME, "ok", f"{len(verdicts)} kernel-log GPU events, none that matters", ev)
    top = _top(verdicts, status)
    if status == "fail":
        # the evidence an admin needs first: the line that failed, verbatim
        ev["line"] = top.event.line
    others = sorted(({v.tag for v in verdicts if v.status != "ok"} | {f["tag"] for f in active or ()}) - {top.tag})
    return Result(NAME, status, _reason(top, others), ev, code=top.tag if status == "fail" else "")


def _still_active(active: list, verdicts: list, ev: dict) -> Result:
    """A fatal fault of this boot, already reported, with nothing fatal new: the check fails with it again."""
    f = active[0]
    others = sorted(({v.tag for v in verdicts if v.status != "ok"} | {x["tag"] for x in active[1:]}) - {f["tag"]})
    also = f"; also {', '.join(others)}" if others else ""
    ev["line"] = f["line"]  # the line that failed first, verbatim
    return Result(NAME, "fail", f"{f['reason']} (logged earlier this boot{also})", ev, code=f["tag"])


def new_faults(verdicts: list) -> list[dict]:
    """The fatal verdicts, as kernlog.sticky keeps them (each with its own drain reason)."""
    return [sticky.fault(v, _reason(v, [])) for v in verdicts if v.status == "fail"]


def parse(text: str | bytes, s) -> list:
    """The kernel-log events of `text` with the site's signatures (xid.signatures_extra, xid.ignore_signatures)."""
    return kernlog.parse(text, extra_signatures=s.signatures_extra, ignore_signatures=s.ignore_signatures)


def boot_id(settings, node: str) -> str | None:
    """This boot's id (xid.boot_id_file, `{node}` filled in), or None when it cannot be read."""
    path = getattr(settings.xid, "boot_id_file", "/proc/sys/kernel/random/boot_id").replace("{node}", node)
    try:
        with open(path) as f:
            return f.read(256).strip() or None
    except OSError:
        return None


def read_from(path: str, mark: dict | None) -> tuple[bytes, dict]:
    """The part of a log file after `mark` ({"ino", "offset"}), up to its last complete line (bytes: the parser
    decodes only the lines it reads), and the new mark. A rotated (other inode) or truncated (shorter) file is read
    from its start."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        start = 0
        if mark and mark.get("ino") == st.st_ino and 0 <= int(mark.get("offset", 0)) <= st.st_size:
            start = int(mark["offset"])
        f.seek(start)
        data = f.read()
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    return data[:end], {"path": path, "ino": st.st_ino, "offset": start + end}


def run(ctx) -> Result:
    s = ctx.settings.xid
    if not ctx.live:
        text = ctx.text(NAME, "dmesg")
        events = parse(text, s)
        if not events and not logline.looks_like_a_log(text, kernlog.events.builtin_keywords()):
            raise NoData("no kernel-log lines in this input (expected dmesg, journalctl or syslog output)")
        return evaluate(events, events, s, live=False)
    path = ctx.state_path("xid")
    state: dict = {}
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    if not isinstance(state, dict):
        state = {}
    boot = boot_id(ctx.settings, ctx.node)
    active = sticky.active(state, boot, ignore=s.ignore, ignore_signatures=s.ignore_signatures)
    if s.log_file and NAME not in ctx.captures:
        # a log file: read only what was appended since the last hook; everything read is new
        text, mark = read_from(s.log_file, state.get("file"))
        events = parse(text, s)
        verdicts = grade(events, s)
        res = evaluate(events, events, s, active=active, verdicts=verdicts)
        nxt = dict(state, file=mark, boot_id=boot or state.get("boot_id"))
        nxt["faults"] = sticky.merge(active, new_faults(verdicts))
        return _deferred(res, path, state, nxt)
    text = ctx.text(NAME, "dmesg")
    events = parse(text, s)
    if active and NAME in ctx.explicit:
        whole = evaluate(events, events, s, live=False)
        if whole.status != "fail":
            return _released(whole, active, path, state)
    new = kernlog.new_events(events, state, boot)
    verdicts = grade(new, s)
    res = evaluate(new, events, s, active=active, verdicts=verdicts)
    nxt = dict(kernlog.next_state(events, boot), faults=sticky.merge(active, new_faults(verdicts)))
    if boot is None:
        nxt["boot_id"] = state.get("boot_id")  # an id not read now is no new boot: a later reboot still ends faults
    return _deferred(res, path, state, nxt)


def _released(whole: Result, active: list, path: str, state: dict) -> Result:
    """An explicit recheck (`slurmkit check --only xid`) that finds no fatal event in the whole kernel log of this
    boot ends the boot's active faults: the admin's way back without a reboot (after a GPU reset and `dmesg -C`, or
    when the site's policy changed). A state it cannot write fails the recheck: the hooks would fail again."""
    try:
        _save(path, dict(state, faults=[]))
    except OSError as e:
        ev = dict(whole.evidence, active_faults=active)
        return Result(NAME, "fail", f"cannot clear this boot's active faults in {path}: {e}", ev, code=active[0]["tag"])
    whole.evidence["cleared_faults"] = active
    whole.reason += f" (the whole kernel log has no fatal event: cleared {len(active)} fault(s) of this boot)"
    return whole


def _deferred(res: Result, path: str, state: dict, nxt: dict) -> Result:
    """Attach the mark move to the result instead of making it: only a hook that acted on the verdict calls
    `res.commit()` (`slurmkit check` never does), so an Xid whose drain failed stays new for the next run."""
    if nxt != state:
        res.commit = lambda: _save(path, nxt)
    return res


def _save(path: str, state: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, json.dumps(state))
