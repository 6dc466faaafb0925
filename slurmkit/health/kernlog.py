"""Pure parser for NVIDIA Xid / NVSwitch SXid events in kernel log text, and the policy that grades them.

Formats (all in tests/fixtures/xid): dmesg seconds `[ 4254.197860]`, `dmesg -T`/`--ctime` `[Fri Apr  5 21:29:39
2024]`, syslog/journalctl `Jun  7 19:32:16 host kernel:` (any locale: `kwi 15`, `6月 28`), RFC3339
`2024-04-05T21:29:39.123+00:00 host kernel:`, and bare message bodies. The Xid number is taken ONLY from the field
anchored right after `NVRM: Xid (PCI:<bus>):`, never from a bus number or a pid elsewhere on the line.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\): "
                    r"(?P<code>\d+), ?(?P<msg>.*)$")
SXID_RE = re.compile(r"(?P<dev>nvidia-nvswitch\d+): SXid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+), "
                     r"?(?P<msg>.*)$")
# "fallen off the bus" said without an Xid line (the driver's probe message, split over continuation lines)
OFFBUS_RE = re.compile(r"NVRM: (?:The NVIDIA GPU |GPU )(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
MONO_RE = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]")
BRACKET_RE = re.compile(r"^\[(?P<t>[^\]]+)\]")
CAUSED_RE = re.compile(r"previous Xid (\d+)", re.I)
RECOVERY_RE = re.compile(r"recovery action changed.*?to\s+0x[0-9a-fA-F]+\s*\((?P<action>[^)]+)\)", re.I)

_CATALOG: dict | None = None


def catalog() -> dict:
    global _CATALOG
    if _CATALOG is None:
        path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "xid_catalog.json")
        with open(path, encoding="utf-8") as f:
            _CATALOG = json.load(f)
    return _CATALOG


@dataclass
class Event:
    kind: str                 # "xid" | "sxid"
    code: int
    pci: str
    message: str
    line: str                 # the log line as it was, for the evidence
    lineno: int
    time: str | None = None   # the timestamp as printed (seconds since boot, or wall clock text)
    mono: float | None = None
    extra: list[str] = field(default_factory=list)   # continuation lines (the "fallen off the bus" block)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "code": self.code, "pci": self.pci, "time": self.time, "line": self.line}


def _prefix_time(prefix: str) -> tuple[str | None, float | None]:
    p = prefix.strip()
    if not p:
        return None, None
    m = MONO_RE.match(p)
    if m:
        return m.group("s"), float(m.group("s"))
    m = BRACKET_RE.match(p)
    if m:
        return m.group("t").strip(), None
    # syslog / journalctl / RFC3339: "<time> <host> kernel:" -> keep the text before the host
    p = re.sub(r"\s*kernel:\s*$", "", p)
    parts = p.rsplit(" ", 1)
    return (parts[0] if len(parts) == 2 else p) or None, None


def parse(text: str) -> list[Event]:
    """Every Xid / SXid / fell-off-the-bus event in the text, in order."""
    events: list[Event] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "NVRM" not in line and "SXid" not in line:      # fast path: most kernel lines are not ours
            continue
        m = XID_RE.search(line)
        if m:
            t, mono = _prefix_time(line[:m.start()])
            events.append(Event("xid", int(m.group("code")), m.group("pci").lower(), m.group("msg").strip(),
                                line.rstrip(), i + 1, t, mono))
            continue
        m = SXID_RE.search(line)
        if m:
            t, mono = _prefix_time(line[:m.start()])
            events.append(Event("sxid", int(m.group("code")), m.group("pci").lower(), m.group("msg").strip(),
                                line.rstrip(), i + 1, t, mono))
            continue
        m = OFFBUS_RE.search(line)
        if m and not any(e.code == 79 and e.pci == m.group("pci").lower() for e in events[-5:]):
            block = [line.rstrip()]
            j = i + 1
            while j < len(lines) and lines[j][:1] == " " and "NVRM:" in lines[j] and not MONO_RE.match(lines[j]):
                block.append(lines[j].rstrip())
                j += 1
            if "fallen off the bus" in " ".join(block):
                t, mono = _prefix_time(line[:m.start()])
                events.append(Event("offbus", 79, m.group("pci").lower(), "GPU has fallen off the bus",
                                    line.rstrip(), i + 1, t, mono, extra=block[1:]))
    return events


@dataclass
class Verdict:
    status: str               # ok | warn | fail
    code: int
    kind: str
    pci: str
    name: str
    action: str
    why: str                  # why this status ("catalog: fatal", "caused by previous Xid 79" ...)
    event: Event


def grade(ev: Event, events: list[Event], *, fatal_extra=(), ignore=(), unknown_status="warn") -> Verdict:
    cat = catalog()
    sev_map = cat["severity"]
    if ev.kind == "offbus":
        return Verdict("fail", 79, ev.kind, ev.pci, "GPU has fallen off the bus", "RESTART_BM",
                       "driver says the GPU fell off the bus", ev)
    if ev.kind == "sxid":
        fatal = bool(re.match(r"fatal\b", ev.message, re.I)) or any(
            o.kind == "sxid" and o.code == ev.code and o.pci == ev.pci and re.match(r"fatal\b", o.message, re.I)
            for o in events)
        nonfatal = bool(re.match(r"non-?fatal\b", ev.message, re.I))
        st = "fail" if fatal and not nonfatal else "warn"
        return Verdict(st, ev.code, "sxid", ev.pci, "NVSwitch SXid", "RESET_GPU" if st == "fail" else "IGNORE",
                       "SXid marked Fatal" if st == "fail" else "non-fatal SXid", ev)
    code = ev.code
    entry = cat["xid"].get(str(code))
    name = entry["name"] if entry else "unknown Xid"
    action = entry["action"] if entry else "UNKNOWN"
    if code in ignore:
        return Verdict("ok", code, "xid", ev.pci, name, action, "ignored by xid.ignore", ev)
    if code in fatal_extra:
        return Verdict("fail", code, "xid", ev.pci, name, action, "fatal by xid.fatal_extra", ev)
    m = CAUSED_RE.search(ev.message)
    if m and int(m.group(1)) != code:
        prev = Event("xid", int(m.group(1)), ev.pci, "", ev.line, ev.lineno, ev.time, ev.mono)
        v = grade(prev, events, fatal_extra=fatal_extra, ignore=ignore, unknown_status=unknown_status)
        return Verdict(v.status, code, "xid", ev.pci, name, v.action, f"caused by previous Xid {prev.code}: {v.why}",
                       ev)
    if entry is None:
        return Verdict(unknown_status, code, "xid", ev.pci, name, action, "not in the Xid catalog", ev)
    sev = entry["severity"]
    if sev == "text":
        if code == 154:
            m = RECOVERY_RE.search(ev.message)
            act = m.group("action").strip() if m else None
            st = cat["recovery_actions_154"].get(act, "fail") if act else "warn"
            return Verdict(st, code, "xid", ev.pci, name, act or action, f"recovery action: {act or 'not stated'}", ev)
        if code == 63:
            msg = ev.message.lower()
            if "reset gpu" in msg or "pending" in msg or "reset the gpu" in msg:
                return Verdict("fail", code, "xid", ev.pci, name, "RESET_GPU", "row remap/retirement waits for a GPU "
                               "reset", ev)
            return Verdict("warn", code, "xid", ev.pci, name, action, "page retirement recorded", ev)
    return Verdict(sev_map.get(sev, "warn"), code, "xid", ev.pci, name, action, f"catalog: {action}", ev)


def grade_all(events: list[Event], **kw) -> list[Verdict]:
    return [grade(e, events, **kw) for e in events]


# --- only new events count: a small state per node ----------------------------------------------------------

def new_events(events: list[Event], text_lines_hint: list[str] | None, state: dict, boot_id: str | None) -> list[Event]:
    """Events after the last one seen (state["last_line"]) in this boot. When the last seen line is no longer in
    the log (new boot, log cleared or rotated), every event is new."""
    if not state or (boot_id and state.get("boot_id") not in (None, boot_id)):
        return events
    last = state.get("last_line")
    if not last:
        return events
    idx = None
    for i, e in enumerate(events):
        if e.line == last:
            idx = i
    if idx is None:
        return events
    return events[idx + 1:]


def next_state(events: list[Event], boot_id: str | None) -> dict:
    return {"boot_id": boot_id, "last_line": events[-1].line if events else None}
