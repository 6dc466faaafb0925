"""Pure parser for nccl-tests / rccl-tests `all_reduce_perf` output.

Handles the variants in tests/fixtures/nccl: `srun --label` prefixes (`0: `, ` 0: `), mpirun noise
(`[host:pid] SET ...`), NCCL_DEBUG=INFO lines interleaved with the table, NCCL WARN lines (one hard-wrapped),
`Test NCCL failure`, `#wrong` = N/A (validation off), out-of-bounds footers, footers trimmed by the author (the
average is then computed from the rows and marked so), rccl-tests' extra lines.
"""
from __future__ import annotations

import re

_LABEL = re.compile(r"^\s*\d+:\s?")
_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+"
                  r"(?P<rest>.*)$")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<v>[0-9.]+)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<ok>\w+)?")
_WARN = re.compile(r"NCCL WARN (?P<msg>.*)$")
_FAIL = re.compile(r"(Test NCCL failure.*|Test failure .*|Test CUDA failure.*)")
_VERSION = re.compile(r"NCCL version (\S+)")


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def parse(text: str) -> dict:
    rows = []
    warns: list[str] = []
    failures: list[str] = []
    avg = None
    oob = None
    version = None
    wrong_total = 0
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = _LABEL.sub("", raw, count=1) if _LABEL.match(raw) else raw
        m = _WARN.search(line)
        if m:
            msg = m.group("msg").strip()
            # a WARN hard-wrapped by the terminal/paste: glue a short following line that is not a log line
            if i + 1 < len(lines) and not re.match(r"^\S+:\d+:\d+ ", lines[i + 1]) and lines[i + 1].strip() \
                    and not lines[i + 1].lstrip().startswith("#"):
                msg += " " + lines[i + 1].strip()
            warns.append(msg)
            continue
        m = _FAIL.search(line)
        if m:
            failures.append(m.group(1).strip())
            continue
        m = _AVG.search(line)
        if m:
            avg = float(m.group("v"))
            continue
        m = _OOB.search(line)
        if m:
            oob = int(m.group("n"))
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
            continue
        for w in (cells[3], cells[7]):
            if w.isdigit():
                wrong_total += int(w)
        rows.append({"size": int(m.group("size")), "type": m.group("type"), "busbw_oop": oop_bw, "busbw_ip": ip_bw,
                     "wrong": [cells[3], cells[7]]})
    avg_source = "footer"
    if avg is None and rows:
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
    }
