"""Pure parser for nccl-tests / rccl-tests `all_reduce_perf` output.

Handles the variants in tests/fixtures/nccl: `srun --label` prefixes (`0: `, ` 0: `), mpirun noise
(`[host:pid] SET ...`), NCCL_DEBUG=INFO lines interleaved with the table, NCCL WARN lines (one hard-wrapped),
`Test NCCL failure`, `#wrong` = N/A (validation off), out-of-bounds footers, footers trimmed by the author (the
average is then computed from the rows and marked so), rccl-tests' extra lines.

A number is read only when it is what nccl-tests prints (`%.2f`: ASCII digits, a point, bounded length): `nan`,
`inf`, `1e400`, a 400-digit footer, `1.2.3` are unreadable, listed in "unreadable" with their line, never a
bandwidth. Integers are ASCII and bounded too (no superscript digits, no 4,300-digit ValueError).
"""

from __future__ import annotations

import re

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

_LABEL = re.compile(r"^\s*[0-9]{1,6}:\s?")
_ROW = re.compile(
    r"^\s*(?P<size>[0-9]{1,20})\s+(?P<count>[0-9]{1,20})\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+"
    r"(?P<root>-?[0-9]{1,6})\s+(?P<rest>.*)$",
    re.ASCII,
)
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<v>\S*)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<n>\S+)\s*(?P<ok>\w+)?")
_FLOAT = re.compile(r"[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12}", re.ASCII)
_INT = re.compile(r"[0-9]{1,15}", re.ASCII)
_WARN = re.compile(r"NCCL WARN (?P<msg>.*)$")
_FAIL = re.compile(r"(Test NCCL failure.*|Test failure .*|Test CUDA failure.*)")
_VERSION = re.compile(r"NCCL version (\S+)")


def _num(s: str) -> float | None:
    """A bandwidth or time as nccl-tests prints it; None for anything else (nan, inf, 1e400, 1.2.3)."""
    return float(s) if _FLOAT.fullmatch(s) else None


def _int(s: str) -> int | None:
    return int(s) if _INT.fullmatch(s) else None


def parse(text: str) -> dict:
    rows: list[dict[str, Any]] = []
    warns: list[str] = []
    failures: list[str] = []
    avg = None
    oob = None
    version = None
    wrong_total = 0
    unreadable: list[str] = []
    footer = False
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = _LABEL.sub("", raw, count=1) if _LABEL.match(raw) else raw
        m = _WARN.search(line)
        if m:
            msg = m.group("msg").strip()
            # a WARN hard-wrapped by the terminal/paste: glue a short following line that is not a log line
            if (
                i + 1 < len(lines)
                and not re.match(r"^\S+:\d+:\d+ ", lines[i + 1])
                and lines[i + 1].strip()
                and not lines[i + 1].lstrip().startswith("#")
            ):
                msg += " " + lines[i + 1].strip()
            warns.append(msg)
            continue
        m = _FAIL.search(line)
        if m:
            failures.append(m.group(1).strip())
            continue
        m = _AVG.search(line)
        if m:
            footer = True
            avg = _num(m.group("v"))
            if avg is None:
                unreadable.append(f"line {i + 1}: avg bus bandwidth {m.group('v')[:40]!r} is not a number")
            continue
        m = _OOB.search(line)
        if m:
            footer = True
            oob = _int(m.group("n"))
            if oob is None:
                unreadable.append(f"line {i + 1}: out of bounds values {m.group('n')[:40]!r} is not a count")
            continue
        m = _VERSION.search(line)
        if m and version is None:
            version = m.group(1)
        if line.lstrip().startswith("#"):
            continue
        m = _ROW.match(line)
        if not m:
            continue
        cells = m.group("rest").split()
        # out-of-place: time algbw busbw #wrong ; in-place: time algbw busbw #wrong
        if len(cells) < 8:
            continue
        oop_bw, ip_bw = _num(cells[2]), _num(cells[6])
        if oop_bw is None or ip_bw is None:
            unreadable.append(f"line {i + 1}: bus bandwidth {cells[2][:40]!r} / {cells[6][:40]!r} is not a number")
            continue
        for w in (cells[3], cells[7]):
            n = _int(w)
            if n is not None:
                wrong_total += n
            elif w not in ("N/A", "n/a"):
                unreadable.append(f"line {i + 1}: #wrong {w[:40]!r} is not a count")
        rows.append(
            {
                "size": int(m.group("size")),
                "type": m.group("type"),
                "busbw_oop": oop_bw,
                "busbw_ip": ip_bw,
                "wrong": [cells[3], cells[7]],
            }
        )
    avg_source: str | None = "footer"
    if avg is None and footer:
        avg_source = None
    elif avg is None and rows:
        vals = [r["busbw_oop"] for r in rows] + [r["busbw_ip"] for r in rows]
        avg = round(sum(vals) / len(vals), 3)
        avg_source = "computed from rows (footer missing)"
    elif avg is None:
        avg_source = None
    return {
        "avg_bus_bandwidth_gbps": avg,
        "avg_source": avg_source,
        "peak_busbw_gbps": max((max(r["busbw_oop"], r["busbw_ip"]) for r in rows), default=None),
        "rows": len(rows),
        "max_size": max((r["size"] for r in rows), default=None),
        "out_of_bounds": oob,
        "wrong": wrong_total,
        "warnings": warns,
        "failures": failures,
        "nccl_version": version,
        "footer": footer,
        "unreadable": unreadable,
    }
