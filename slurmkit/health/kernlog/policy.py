"""Grading kernel-log events: the Xid catalog (slurmkit/data/xid_catalog.json) for Xid lines, the signature data
(slurmkit/data/kernlog_signatures.json) for the rest, and the site's overrides. Linear in the number of events."""

from __future__ import annotations

import json
import os
import re
from ...record import Record

from . import signatures
from .events import Event

CAUSED_RE = re.compile(r"previous Xid (\d+)", re.I)
RECOVERY_RE = re.compile(r"recovery action changed.*?to\s+0x[0-9a-fA-F]+\s*\((?P<action>[^)]+)\)", re.I)
_FATAL_RE = re.compile(r"fatal\b", re.I)
_NONFATAL_RE = re.compile(r"non-?fatal\b", re.I)
_CATALOG: dict | None = None


def catalog() -> dict:
    global _CATALOG
    if _CATALOG is None:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "data", "xid_catalog.json")
        with open(path, encoding="utf-8") as f:
            _CATALOG = json.load(f)
    return _CATALOG


class Verdict(Record, kw_only=False):
    """How one kernel-log event is graded: status, catalog name, the action it asks for, and why."""

    status: str  # ok | warn | fail
    code: int
    kind: str
    pci: str
    name: str
    action: str
    why: str  # why this status ("catalog: fatal", "caused by previous Xid 79" ...)
    event: Event
    tag: str = ""  # drain reason tag: "xid79", "sxid20034", "xid_rminit" ...
    says: str = ""  # what happened, after the GPU name ("fell off the bus")
    todo: str = ""  # what an admin does next


class Context:
    """What grading one event needs to know about the others, computed once per log (no per-event rescans)."""

    def __init__(self, events: list[Event], extra_signatures=()):
        self.sigs = {s.id: s for s in signatures.active(extra_signatures)}
        self.fatal_sxid = {(e.code, e.pci) for e in events if e.kind == "sxid" and _FATAL_RE.match(e.message)}
        self.previous: dict[int, Event] = {}  # id(154 event) -> the event on its GPU that came before it
        last: dict[str, Event] = {}
        for e in events:
            if e.kind == "xid" and e.code == 154:
                if e.pci in last:
                    self.previous[id(e)] = last[e.pci]
                continue
            if e.kind in ("xid", "sig"):
                last[e.pci] = e


def todo_for(action: str) -> str:
    return signatures.data()["todo_by_action"].get(action, "see NVIDIA's Xid catalog")


def grade(
    ev: Event,
    events: list[Event],
    *,
    fatal_extra=(),
    ignore=(),
    unknown_status="warn",
    userspace="warn",
    extra_signatures=(),
    context: Context | None = None,
) -> Verdict:
    v = _grade(ev, context or Context(events, extra_signatures), fatal_extra, ignore, unknown_status)
    if ev.source != "kernel" and v.status != "ok":
        v.why = f"written by userspace ({ev.source}), not the kernel: {v.why}"
        v.status = userspace if v.status == "fail" else min(v.status, userspace, key=("ok", "warn", "fail").index)
    return v


def grade_all(events: list[Event], **kw) -> list[Verdict]:
    ctx = Context(events, kw.get("extra_signatures", ()))
    return [grade(e, events, context=ctx, **kw) for e in events]


def _grade(ev: Event, ctx: Context, fatal_extra, ignore, unknown_status) -> Verdict:
    if ev.kind == "sig":
        return _grade_sig(ev, ctx)
    if ev.kind == "unparsed":
        return Verdict(
            "warn",
            0,
            "unparsed",
            ev.pci,
            "unreadable Xid line",
            "UNKNOWN",
            "an Xid line this parser could not read",
            ev,
            "xid",
            "logged an Xid line slurmkit could not read",
            "read the line in the kernel log",
        )
    if ev.kind == "sxid":
        fatal = (ev.code, ev.pci) in ctx.fatal_sxid
        st = "fail" if fatal and not _NONFATAL_RE.match(ev.message) else "warn"
        return Verdict(
            st,
            ev.code,
            "sxid",
            ev.pci,
            "NVSwitch SXid",
            "RESET_GPU" if st == "fail" else "IGNORE",
            "SXid marked Fatal" if st == "fail" else "non-fatal SXid",
            ev,
            f"sxid{ev.code}",
            f"SXid {ev.code}: {ev.message[:60]}",
            "reset the NVSwitch fabric (reboot the node)" if st == "fail" else "nothing",
        )
    return _grade_xid(ev, ctx, fatal_extra, ignore, unknown_status)


def _grade_sig(ev: Event, ctx: Context) -> Verdict:
    sig = ctx.sigs.get(ev.sig)
    if sig is None:  # aer / aer_port: built from the data's "aer" section
        cfg = signatures.data()["aer"]
        st = "fail" if ev.sig == "aer" else cfg.get("port_only_status", "warn")
        return Verdict(
            st,
            0,
            "sig",
            ev.pci,
            "PCIe AER fatal error",
            cfg["action"],
            f"signature {ev.sig}",
            ev,
            cfg["code"],
            ev.message,
            cfg["todo"],
        )
    return Verdict(
        sig.status, 0, "sig", ev.pci, sig.says, sig.action, f"signature {sig.id}", ev, sig.code, sig.says, sig.todo
    )


def _grade_xid(ev: Event, ctx: Context, fatal_extra, ignore, unknown_status) -> Verdict:
    cat = catalog()
    code = ev.code
    entry = cat["xid"].get(str(code))
    name = entry["name"] if entry else "unknown Xid"
    action = entry["action"] if entry else "UNKNOWN"
    tag = f"xid{code}"

    def v(status, why, act=None, says=None, todo=None):
        act = act or action
        return Verdict(
            status,
            code,
            "xid",
            ev.pci,
            name,
            act,
            why,
            ev,
            tag,
            says or ("fell off the bus" if code == 79 else name),
            todo or todo_for(act),
        )

    if code in ignore:
        return v("ok", "ignored by xid.ignore")
    if code in fatal_extra:
        return v("fail", "fatal by xid.fatal_extra")
    m = CAUSED_RE.search(ev.message)
    if m and len(m.group(1)) > 6:  # no Xid code has more digits (the line parser takes 1-6): not the driver's text
        # graded as an Xid code slurmkit does not know (xid.unknown_status), never as the code it claims
        return v(
            unknown_status, f"names a previous Xid {m.group(1)[:12]}... ({len(m.group(1))} digits), not an Xid code"
        )
    if m and int(m.group(1)) != code:
        prev = Event("xid", int(m.group(1)), ev.pci, "", ev.line, ev.lineno, ev.time, ev.mono)
        p = _grade_xid(prev, ctx, fatal_extra, ignore, unknown_status)
        return v(p.status, f"caused by previous Xid {prev.code}: {p.why}", p.action)
    if entry is None:
        return v(unknown_status, "not in the Xid catalog")
    sev = entry["severity"]
    if sev == "text":
        if code == 154:
            return _grade_154(ev, ctx, v, cat)
        if code == 63:
            msg = ev.message.lower()
            if "reset gpu" in msg or "pending" in msg or "reset the gpu" in msg:
                return v("fail", "row remap/retirement waits for a GPU reset", "RESET_GPU")
            return v("warn", "page retirement recorded")
    return v(cat["severity"].get(sev, "warn"), f"catalog: {action}")


def _grade_154(ev: Event, ctx: Context, v, cat) -> Verdict:
    m = RECOVERY_RE.search(ev.message)
    act = m.group("action").strip() if m else None
    st = cat["recovery_actions_154"].get(act, "fail") if act else "warn"
    prev = ctx.previous.get(id(ev))
    cause = ""
    if prev is not None:
        cause = f"Xid {prev.code}" if prev.kind == "xid" else prev.message
    says = signatures.data()["xid154_actions"].get(act or "", f"recovery action {act or 'not stated'}")
    if cause:
        says += f" (cause: {cause})"
    todo = {"GPU Reset Required": "reset the GPU (nvidia-smi -r)", "Node Reboot Required": "reboot the node"}.get(
        act or "", "drain the node and reset the GPU" if act and act != "None" else "nothing"
    )
    return v(
        st,
        f"recovery action: {act or 'not stated'}" + (f", after {cause}" if cause else ""),
        act or "WORKFLOW_XID_154",
        says,
        todo,
    )
