"""GPU failures logged without an Xid line: the signatures in slurmkit/data/kernlog_signatures.json (plus a site's
own, xid.signatures_extra), matched against kernel message records, and PCIe AER bursts tied to the GPU they hit."""

from __future__ import annotations

import bisect
import json
import os
import re
from ...record import Record

from . import anchors

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

_DATA: dict | None = None
ANY_PCI_RE = re.compile(r"\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]+)?\b")
PCI_RE = re.compile(r"^(?P<dom>[0-9A-Fa-f]{4,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f]+)?$")


def data() -> dict:
    global _DATA
    if _DATA is None:
        path = os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "data", "kernlog_signatures.json"
        )
        with open(path, encoding="utf-8") as f:
            _DATA = json.load(f)
    return _DATA


def norm_pci(pci: str) -> str:
    """'00000000:3B:00.0', '0000:3b:00.0000', '0000:3b:00' -> '0000:3b:00' (domain as a 4-digit minimum, bus:device;
    the function is dropped: Xid lines print none)."""
    m = PCI_RE.match(pci.strip())
    if not m:
        return pci.strip().lower()
    return f"{int(m.group('dom'), 16):04x}:{m.group('bus').lower()}:{m.group('dev').lower()}"


class Signature(Record, frozen=True, kw_only=False):
    """A GPU failure logged without an Xid: the pattern that finds it and what it means."""

    id: str
    code: str
    status: str
    action: str
    says: str
    todo: str
    pattern: str

    @property
    def regex(self) -> re.Pattern:
        """The compiled pattern, from the re module's own cache: a line that reaches it compiles it once; a healthy
        log, whose lines hold none of its anchors (slurmkit/data/kernlog_anchors.json), never does."""
        return re.compile(self.pattern)


REQUIRED = ("id", "match")
STATUSES = ("ok", "warn", "fail")


def compile_one(d: dict, where: str = "", *, check: bool = True) -> Signature:
    """A signature from its data (the JSON file's or a site's config entry); ValueError says what is wrong.
    check: compile its pattern now (a site's, when its config is loaded; the built-in ones are compiled by the
    unit tests, and at run time only when a line reaches them)."""
    missing = [k for k in REQUIRED if not d.get(k)]
    if missing:
        raise ValueError(f"{where}signature needs {', '.join(missing)}")
    if check:
        try:
            re.compile(d["match"])
        except re.error as e:
            raise ValueError(f"{where}signature {d['id']!r}: bad regex: {e}") from None
    st = d.get("status", "fail")
    if st not in STATUSES:
        raise ValueError(f"{where}signature {d['id']!r}: status must be one of {', '.join(STATUSES)}, got {st!r}")
    code = d.get("code") or f"xid_{d['id']}"
    if not code.startswith("xid"):
        raise ValueError(f"{where}signature {d['id']!r}: code must start with 'xid' (the xid check owns the drain)")
    return Signature(
        d["id"],
        code,
        st,
        d.get("action", "RESTART_BM"),
        d.get("says", f"matched {d['id']}"),
        d.get("todo", "see the kernel log"),
        d["match"],
    )


_BUILTIN: tuple | None = None


def builtin() -> tuple:
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = tuple(compile_one(d, check=False) for d in data()["signatures"])
    return _BUILTIN


def validate_extra(entries) -> None:
    """Config check for xid.signatures_extra: each entry compiles (ValueError names the entry)."""
    for i, d in enumerate(entries or ()):
        compile_one(d, f"signatures_extra[{i}]: ")


def active(extra=(), ignore=()) -> tuple:
    sigs = builtin() + tuple(compile_one(d) for d in extra or ())
    return tuple(s for s in sigs if s.id not in set(ignore or ()))


class Match(Record, kw_only=False):
    """A signature found in one kernel message record, with the GPU it names."""

    sig: Signature
    gpu: str | None  # normalised PCI address, "minor N", "GPUn" (the driver's numbering) or None
    record: Any  # the logline.Record matched


def gpu_of(m: re.Match) -> str | None:
    g = m.groupdict()
    if g.get("pci"):
        return norm_pci(g["pci"])
    if g.get("minor"):
        return f"minor {g['minor']}"
    if g.get("inst"):
        return g["inst"]
    return None


def match(records, sigs) -> list[Match]:
    out = []
    for r in records:
        body = r.body
        if "Xid" in body and ("NVRM: Xid" in body or "SXid" in body):
            continue  # Xid lines are read by their own parser
        for s in sigs:
            if not anchors.may_match(s.pattern, body):
                continue  # none of its literals is in the line: no regex to run (or compile)
            m = s.regex.search(body)
            if m:
                anyp = None if gpu_of(m) else ANY_PCI_RE.search(body)
                out.append(Match(s, gpu_of(m) or (norm_pci(anyp.group(0)) if anyp else None), r))
                break
    return out


# --- PCIe AER --------------------------------------------------------------------------------------------


def aer_matches(records) -> list[Match]:
    """A fatal AER record on an NVIDIA device, or on a port with an NVIDIA device in the same burst (records within
    burst_seconds and burst_lines of it): one match per record, naming the GPU."""
    cfg = data()["aer"]
    recs = list(records)
    if not any(anchors.may_match(cfg["fatal"], r.body) for r in recs):
        return []  # no line could be a fatal AER one: nothing to compile
    fatal = re.compile(cfg["fatal"])
    dev = re.compile(cfg["device"])
    sig_gpu = Signature("aer", cfg["code"], "fail", cfg["action"], cfg["says"], cfg["todo"], cfg["fatal"])
    sig_port = Signature(
        "aer_port",
        cfg["code"],
        cfg.get("port_only_status", "warn"),
        cfg["action"],
        cfg["says"] + " on a PCIe port (no GPU named in the burst)",
        cfg["todo"],
        cfg["fatal"],
    )
    out: list[Match] = []
    for i, r in enumerate(recs):
        if not fatal.search(r.body):
            continue
        d = dev.match(r.body)
        named = _named(r.body)
        if d and d.group("drv") == "nvidia":
            out.append(Match(sig_gpu, norm_pci(d.group("pci")), r))
            continue
        gpu = named if named and _is_nvidia(named, recs, dev) else _gpu_in_burst(i, recs, dev, cfg)
        out.append(Match(sig_gpu, gpu, r) if gpu else Match(sig_port, norm_pci(d.group("pci")) if d else None, r))
    return out


_NAMED_RE = re.compile(
    r"error received:? (?:id=\S+ )?"
    r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d+)?)"
)


def _named(body: str) -> str | None:
    """The device an AER record says the error came from ("error received: 0000:02:00.0"), if it names one."""
    m = _NAMED_RE.search(body)
    return norm_pci(m.group("pci")) if m else None


def needs_whole_log(records) -> bool:
    """Whether grading the AER records among `records` (a part of a log: kernlog.native's windows) needs the rest:
    a fatal record on a port that names a device no record here shows as an NVIDIA one (that may be anywhere)."""
    cfg = data()["aer"]
    recs = list(records)
    if not any(anchors.may_match(cfg["fatal"], r.body) for r in recs):
        return False
    fatal, dev = re.compile(cfg["fatal"]), re.compile(cfg["device"])
    for r in recs:
        if not fatal.search(r.body):
            continue
        d = dev.match(r.body)
        named = _named(r.body)
        if named and not (d and d.group("drv") == "nvidia") and not _is_nvidia(named, recs, dev):
            return True
    return False


def _is_nvidia(pci: str, recs, dev) -> bool:
    return any(
        (d := dev.match(r.body)) and d.group("drv") == "nvidia" and norm_pci(d.group("pci")) == pci for r in recs
    )


def _gpu_in_burst(i: int, recs, dev, cfg) -> str | None:
    r0 = recs[i]
    lo = bisect.bisect_left(recs, r0.lineno - cfg["burst_lines"], key=lambda r: r.lineno)
    for j in range(lo, len(recs)):  # the burst: records within burst_lines and burst_seconds of it
        r = recs[j]
        if abs(r.lineno - r0.lineno) > cfg["burst_lines"]:
            if j > i:
                break
            continue
        if r.t is not None and r0.t is not None and abs(r.t - r0.t) > cfg["burst_seconds"]:
            continue
        d = dev.match(r.body)
        if d and d.group("drv") == "nvidia":
            return norm_pci(d.group("pci"))
        m = re.search(
            r"NVRM: (?:Xid \((?:PCI:)?|GPU at PCI:|GPU )(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
            r"[0-9A-Fa-f]{2})",
            r.body,
        )
        if m:
            return norm_pci(m.group("pci"))
    return None
