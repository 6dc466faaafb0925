"""Kernel log text -> events: Xid and NVSwitch SXid lines, the signatures of GPU failures logged without an Xid,
and Xid-looking lines this parser could not read (those are never "no events": they warn).

The Xid number is taken ONLY from the field anchored right after `NVRM: Xid (PCI:<bus>):`, never from a bus number
or a pid elsewhere on the line; any spacing (tabs too) and any PCI spelling (`00000000:3B:00.0`, `0000:3b:00.0000`,
no `PCI:` in old drivers) is accepted.
"""

from __future__ import annotations

import re
from ...record import Record, field

from . import anchors, logline, signatures

_PCI = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]+)?"
XID_RE = re.compile(
    r"NVRM:\s*Xid\s*\(\s*(?:PCI:\s*)?(?P<pci>" + _PCI + r")\s*\)\s*:\s*(?P<code>\d{1,6})\b\s*,?\s*"
    r"(?P<msg>.*)$"
)
SXID_RE = re.compile(
    r"(?P<dev>nvidia-nvswitch\d+):\s*SXid\s*\(\s*(?:PCI:\s*)?(?P<pci>" + _PCI + r")\s*\)\s*:\s*"
    r"(?P<code>\d{1,6})\b\s*,?\s*(?P<msg>.*)$"
)
# what an Xid line must contain to be one we must read: anything that says so and did not parse is a finding
LOOKS_XID_RE = re.compile(r"NVRM:\s*Xid\b|\bSXid\s*\(")
GPU_AT_RE = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<pci>" + _PCI + r")")
# the fields an Xid line carries before the driver's own text: `pid=1234, ` / `pid='<unknown>', ` and `name=<comm>, `
_PID_RE = re.compile(r"pid=(?:\d+|'[^',]{0,32}'|<[^>,]{0,32}>)\s*,\s*")
COMM_MAX = 15  # the kernel's TASK_COMM_LEN less its NUL: a process name (prctl PR_SET_NAME) is at most this long


class Event(Record, kw_only=False):
    """One kernel-log event: an Xid or SXid line, a signature match, or an Xid line that did not parse."""

    kind: str  # "xid" | "sxid" | "sig" (a signature) | "unparsed" (looked like an Xid, did not parse)
    code: int  # the Xid / SXid number; 0 for a signature or an unparsed line
    pci: str  # the GPU: normalised PCI address "0000:3b:00", "minor 0", "GPU0", or "" (not named)
    message: str  # Xid: the driver's text after the pid= and name= fields (driver_text); else the message
    line: str  # the log line as it was, for the evidence
    lineno: int  # 1-based line number (the native path: of the windows it parsed, see kernlog.native)
    time: str | None = None  # the timestamp as printed
    mono: float | None = None  # seconds (since boot, or a wall clock) comparable within the log, when known
    extra: list[str] = field(default_factory=list)  # continuation lines (the "fallen off the bus" block)
    sig: str = ""  # the signature id ("offbus", "aer", ...) for kind "sig"
    source: str = "kernel"  # who wrote the line: "kernel", or a userspace writer ("syslog", a program's tag)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "code": self.code, "pci": self.pci, "time": self.time, "line": self.line}
        if self.sig:
            d["signature"] = self.sig
        if self.source != "kernel":
            d["source"] = self.source
        return d


def keywords(sigs, aer: bool = True) -> tuple[str, ...] | None:
    """The literal anchors of every pattern a line is read with (the Xid/SXid patterns, the signatures in use, the
    AER fatal pattern and the `nvidia <pci>:` device lines an AER burst is tied to a GPU by): only lines holding one
    are parsed. None when a pattern has no literal anchor (a site's signature, say): then every line is."""
    pats = [XID_RE, SXID_RE, LOOKS_XID_RE, GPU_AT_RE] + [s.pattern for s in sigs]
    if aer:
        pats += [signatures.data()["aer"]["fatal"], "nvidia"]
    key = tuple(p if isinstance(p, str) else p.pattern for p in pats)
    if key not in _KEYWORDS:
        _KEYWORDS[key] = anchors.keywords(pats)
    return _KEYWORDS[key]


_KEYWORDS: dict = {}


def builtin_patterns() -> list:
    """Every built-in pattern whose anchors a scan asks for (their table: anchors.TABLE_PATH)."""
    cfg = signatures.data()["aer"]
    return (
        [XID_RE, SXID_RE, LOOKS_XID_RE, GPU_AT_RE]
        + [s.pattern for s in signatures.builtin()]
        + [cfg["fatal"], "nvidia"]
    )


def builtin_keywords() -> tuple[str, ...] | None:
    return keywords(signatures.builtin())


def pieces(sigs, aer: bool = True) -> tuple[str, ...] | None:
    """The native prefilter's literals (anchors.pieces) for the same patterns as keywords(): the AER device
    pattern is left out, the device lines an AER burst names its GPU by are found in the burst's window."""
    pats = [XID_RE, SXID_RE, LOOKS_XID_RE, GPU_AT_RE] + [s.pattern for s in sigs]
    if aer:
        pats.append(signatures.data()["aer"]["fatal"])
    key = ("pieces",) + tuple(p if isinstance(p, str) else p.pattern for p in pats)
    if key not in _KEYWORDS:
        _KEYWORDS[key] = anchors.pieces(pats)
    return _KEYWORDS[key]


def _native_records(text, sigs, aer: bool, native):
    """Records of the native prefilter's windows (kernlog.native), or None: not wanted, not installed, a pattern
    with no literal anchor, or an AER record only the whole log can grade."""
    if native is False or isinstance(text, str):
        return None
    from . import native as _native  # here: the hooks' dmesg text (str) never imports it

    if native is None and len(text) < _native.MIN_BYTES:
        return None
    toks = pieces(sigs, aer)
    kws = keywords(sigs, aer)
    if toks is None or kws is None or _native.module() is None:
        return None
    cfg = signatures.data()["aer"]
    fatal = anchors.pieces([cfg["fatal"]]) if aer else ()
    recs = logline.records(_native.reduce(text, toks, tuple(fatal or ()), cfg["burst_lines"]), kws)
    if aer and signatures.needs_whole_log(recs):
        return None
    return recs


def parse(
    text, *, extra_signatures=(), ignore_signatures=(), prefilter: bool = True, native: bool | None = None
) -> list[Event]:
    """Every Xid / SXid / signature event in the text (str; bytes or an mmap of a log file, decoded only where a
    line is read), in log order. prefilter False parses every line (the reference the prefiltered parse must equal).
    native: the native prefilter (kernlog.native) for bytes of at least native.MIN_BYTES (None), always when it
    imports (True), never (False: the pure-Python path, same events)."""
    sigs = signatures.active(extra_signatures, ignore_signatures)
    aer = "aer" not in set(ignore_signatures or ())
    recs = _native_records(text, sigs, aer, native) if prefilter else None
    if recs is None:
        if not isinstance(text, (str, bytes)):
            text = text[:]  # an mmap: the pure-Python path needs bytes' count()
        recs = logline.records(text, keywords(sigs, aer) if prefilter else None)
    events: list[Event] = []
    pcis: list[str] = []
    other: list = []
    for r in recs:
        lines = (r.line,) + tuple(r.extra)
        found = False
        for k, raw in enumerate(lines):
            body = r.body if k == 0 and not r.extra else logline.split_prefix(raw)[0]
            ev = _xid(body, raw, r, k)
            if ev is not None:
                events.append(ev)
                found = True
                if ev.kind == "xid":
                    pcis.append(ev.pci)
        if not found:
            m = GPU_AT_RE.search(r.body) if "GPU at" in r.body else None
            if m:
                pcis.append(signatures.norm_pci(m.group("pci")))
            other.append(r)
    matches = signatures.match(other, sigs)
    if aer:
        matches += signatures.aer_matches(recs)
    only = sorted(set(pcis))
    for mt in matches:
        r = mt.record
        gpu = mt.gpu or (only[0] if len(only) == 1 else "")
        events.append(
            Event("sig", 0, gpu, mt.sig.says, r.line, r.lineno, r.time, r.t, list(r.extra), mt.sig.id, r.source)
        )
    events.sort(key=lambda e: e.lineno)
    return events


def driver_text(msg: str) -> str:
    """The driver's own text of an Xid line's message, without its `pid=` and `name=` fields. The name is the
    process's comm, which any user sets (prctl): a name reading `previous Xid 79` must not make the driver say so.
    A comm is at most COMM_MAX characters and may itself hold ", ", so the field ends at the LAST ", " that could
    close it: whatever the name holds is dropped (at worst with a few characters of the driver's text, never
    with a name's)."""
    m = _PID_RE.match(msg)
    rest = msg[m.end() :] if m else msg
    if not rest.startswith("name="):
        return msg if m is None else rest
    cut = rest.rfind(", ", len("name="), len("name=") + COMM_MAX + 2)
    if cut < 0:  # no driver text after the name (the line ends with it)
        return "" if len(rest) <= len("name=") + COMM_MAX + 1 else rest[len("name=") + COMM_MAX :].lstrip(", ")
    return rest[cut + 2 :].lstrip()


def _xid(body: str, raw: str, r, k: int) -> Event | None:
    if "Xid" not in body:
        return None
    lineno = r.lineno + k
    src = r.source if k == 0 else logline.split_prefix(raw)[2]
    for kind, rx in (("xid", XID_RE), ("sxid", SXID_RE)):
        m = rx.search(body)
        if m:
            pci, msg = signatures.norm_pci(m.group("pci")), m.group("msg").strip()
            if kind == "xid":
                msg = driver_text(msg)  # graded on the driver's words only, never a process name's
            return Event(kind, int(m.group("code")), pci, msg, raw.rstrip(), lineno, r.time, r.t, source=src)
    if LOOKS_XID_RE.search(body):
        return Event(
            "unparsed", 0, "", "an Xid line this parser could not read", raw.rstrip(), lineno, r.time, r.t, source=src
        )
    return None
