"""Column tables: `nvidia-smi dmon`, `nvidia-smi pmon` (old and new column sets, dash rows) and `dcgmi dmon`
(two header lines, `N/A` in the first sample). Columns are found by name in the header, never by position."""

from __future__ import annotations

from ..errors import UsageError
from .cells import MAX_VALUE, PERCENT, index, is_index, missing, number
from .model import Capture


def _header(lines: list[str], path: str, prefix: str) -> tuple[int, list[str]]:
    for i, ln in enumerate(lines, 1):
        if ln.strip():
            if not ln.lstrip().startswith(prefix):
                raise UsageError(f"expected a header line starting with {prefix!r}", path=path, line=i)
            return i, ln.lstrip()[len(prefix) :].split()
    raise UsageError("empty capture", path=path)


def _rows(lines: list[str], start: int, *, header_prefix: str):
    """(line number, cells) of every data row after the header; repeated header/unit lines are skipped."""
    for i, ln in enumerate(lines[start:], start + 1):
        s = ln.strip()
        if not s or s.startswith("#") or s.startswith(header_prefix) or s == "ID" or s.startswith("ID "):
            continue
        yield i, s.split()


def parse_dmon(text: str, *, path: str = "<capture>") -> Capture:
    """`nvidia-smi dmon`: one row per GPU per interval. sm % is the utilisation; pwr W; fb MiB when -s m."""
    lines = text.splitlines()
    h, cols = _header(lines, path, "#")
    if not cols or cols[0] != "gpu":
        raise UsageError(f"not a dmon header (first column {cols[:1]})", path=path, line=h)
    cap = Capture(format="nvidia-smi-dmon")
    for i, cells in _rows(lines, h, header_prefix="#"):
        if len(cells) != len(cols):
            raise UsageError(f"expected {len(cols)} columns as the header, got {len(cells)}", path=path, line=i)
        row = dict(zip(cols, cells))
        if missing(row["gpu"]):
            raise UsageError("a dmon row without a GPU index", path=path, line=i)
        idx = index(row["gpu"], path=path, line=i, field="gpu")
        g = cap.gpu(idx, index=idx)
        g.add(
            util=number(row["sm"], path=path, line=i, field="sm", hi=PERCENT) if "sm" in row else None,
            power=number(row["pwr"], path=path, line=i, field="pwr") if "pwr" in row else None,
            mem_used=number(row["fb"], path=path, line=i, field="fb") if "fb" in row else None,
        )
    if not cap.gpus:
        raise UsageError("no dmon rows after the header", path=path, line=h)
    cap.snapshot = all(len(g.util) <= 1 for g in cap.gpus.values())
    return cap


def parse_pmon(text: str, *, path: str = "<capture>") -> Capture:
    """`nvidia-smi pmon`: one row per process per interval (a row of dashes: no process on that GPU). A GPU's
    utilisation at a tick is the sum of its processes' sm %, 0 for a dash row. A new tick starts when a
    (gpu, pid) pair repeats or the GPU index goes down."""
    lines = text.splitlines()
    h, cols = _header(lines, path, "#")
    if not cols or cols[0] != "gpu" or "pid" not in cols:
        raise UsageError("not a pmon header (needs gpu and pid columns)", path=path, line=h)
    cap = Capture(format="nvidia-smi-pmon")
    tick: dict[int, list] = {}
    seen: set = set()
    last_idx = -1

    def flush():
        for idx, procs in tick.items():
            g = cap.gpu(idx, index=idx)
            sms = [p["sm"] for p in procs if p is not None and p["sm"] is not None]
            g.add(
                util=min(100.0, sum(sms)) if sms or all(p is None for p in procs) else None,
                mem_used=sum(p["fb"] for p in procs if p and p.get("fb") is not None) or None,
            )
        tick.clear()
        seen.clear()

    ncmd = len(cols) - 1  # the command name is the rest of the line
    for i, cells in _rows(lines, h, header_prefix="#"):
        if len(cells) < ncmd:
            raise UsageError(f"expected at least {ncmd} columns as the header, got {len(cells)}", path=path, line=i)
        row = dict(zip(cols[:-1], cells[:ncmd]))
        row[cols[-1]] = " ".join(cells[ncmd:])
        if missing(row["gpu"]):
            raise UsageError("a pmon row without a GPU index", path=path, line=i)
        idx = index(row["gpu"], path=path, line=i, field="gpu")
        pid = row["pid"]
        if (idx, pid) in seen or idx < last_idx:
            flush()
        seen.add((idx, pid))
        last_idx = idx
        if missing(pid):  # a dash row: nothing runs on this GPU
            tick.setdefault(idx, []).append(None)
            continue
        proc = {
            "pid": int(pid) if is_index(pid) else pid,
            "name": row.get("command") or None,
            "sm": number(row["sm"], path=path, line=i, field="sm", hi=PERCENT) if "sm" in row else None,
            "fb": number(row["fb"], path=path, line=i, field="fb") if "fb" in row else None,
        }
        tick.setdefault(idx, []).append(proc)
        g = cap.gpu(idx, index=idx)
        if not any(p["pid"] == proc["pid"] for p in g.processes):
            g.processes.append({"pid": proc["pid"], "name": proc["name"], "used_mib": proc["fb"]})
    flush()
    if not cap.gpus:
        raise UsageError("no pmon rows after the header", path=path, line=h)
    cap.snapshot = all(len(g.util) <= 1 for g in cap.gpus.values())
    return cap


# dcgmi dmon column names -> (attribute, scale): ratios (0..1) become %
DCGM = {
    "GPUTL": ("util", 1.0),
    "SMACT": ("sm_active", 100.0),
    "TENSO": ("tensor_active", 100.0),
    "DRAMA": ("dram_active", 100.0),
    "POWER": ("power", 1.0),
    "FBUSD": ("mem_used", 1.0),
}


def parse_dcgmi(text: str, *, path: str = "<capture>") -> Capture:
    """`dcgmi dmon -e ...`: `#Entity` header, an `ID` line (units), rows `GPU 3  0.000 ...`. Utilisation is
    GPUTL (203) when present, else GRACT (1001, graphics engine active); `N/A` (a first sample, MIG) is None."""
    lines = text.splitlines()
    h, cols = _header(lines, path, "#Entity")
    cap = Capture(format="dcgmi-dmon")
    for i, cells in _rows(lines, h, header_prefix="#Entity"):
        if len(cells) < 2 or cells[0] not in ("GPU", "GI", "CI"):
            raise UsageError("expected a row 'GPU <id> <values...>'", path=path, line=i)
        ent, vals = f"{cells[0]} {cells[1]}", cells[2:]
        if len(vals) != len(cols):
            raise UsageError(f"expected {len(cols)} values as the header, got {len(vals)}", path=path, line=i)
        row = dict(zip(cols, vals))
        idx = int(cells[1]) if is_index(cells[1]) else ent
        g = cap.gpu(idx, index=idx if isinstance(idx, int) else None)
        sample = {}
        for col, (attr, scale) in DCGM.items():
            if col in row:
                # a percentage (GPUTL) at most 100, a ratio (SMACT, TENSO, DRAMA: scaled by 100) at most 1
                hi = PERCENT / scale if attr.endswith(("util", "_active")) else MAX_VALUE
                v = number(row[col], path=path, line=i, field=col, hi=hi)
                sample[attr] = None if v is None else v * scale
        if "util" not in sample and "GRACT" in row:
            ratio = "." in row["GRACT"]
            v = number(row["GRACT"], path=path, line=i, field="GRACT", hi=1.0 if ratio else PERCENT)
            # 1001 is a ratio ("0.000"); some builds print the integer % of 203 under this name ("0")
            sample["util"] = None if v is None else (v * 100.0 if ratio else v)
        g.add(**sample)
    if not cap.gpus:
        raise UsageError("no dcgmi rows after the header", path=path, line=h)
    for g in cap.gpus.values():
        valid = [u for u in g.util if u is not None]
        if g.util and not valid and any(s is not None for s in g.sm_active):
            g.mig = True
            cap.note(f"GPU {g.key}: no utilisation but profiling fields read: MIG mode (not a fault)", gpu=g.key)
    cap.snapshot = all(len([u for u in g.util if u is not None]) <= 1 for g in cap.gpus.values())
    return cap
