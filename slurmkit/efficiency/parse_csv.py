"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` (one snapshot or an `-l`/`-lms` series) and
`--query-compute-apps=...`, alone or several back to back in one file (a header line starts a new table).

Without a header the columns are named from their units (`%`, `W`, `MiB`, a timestamp, a `GPU-` UUID) where
that is unambiguous; a headerless, unitless table needs `fields` (the --query list), else it is bad input.
"""

from __future__ import annotations

import re
from datetime import datetime

from ..errors import UsageError
from .cells import MAX_VALUE, PERCENT, index, is_index, is_number, missing, number, split_unit
from .model import Capture

_HEAD_CELL = re.compile(r"^[a-z][a-z0-9_.]*( \[[^\]]+\])?$")
_TS = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)?$")
_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")
RECOVERY = {"none", "reset", "reboot", "drain_p2p", "drain and reset", "drain_and_reset"}
# aliases nvidia-smi expands in its header (`clocks.gr` prints `clocks.current.graphics`)
ALIASES = {"used_memory": "used_gpu_memory", "gpu_util": "utilization.gpu", "memory.util": "utilization.memory"}


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def is_header(line: str) -> bool:
    cells = _split(line)
    return (
        bool(cells)
        and all(_HEAD_CELL.match(c) for c in cells)
        and any("." in c or "_" in c or c in ("index", "name", "uuid", "pid", "timestamp", "serial") for c in cells)
    )


def _field(cell: str) -> str:
    name = cell.split(" [", 1)[0].strip()
    return ALIASES.get(name, name)


def _ts(cell: str) -> float | None:
    try:
        return datetime.strptime(cell.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        try:
            return datetime.strptime(cell.strip(), "%Y/%m/%d %H:%M:%S").timestamp()
        except ValueError:
            return None


def infer_fields(cells: list[str], cap: Capture, line: int) -> list[str | None]:
    """Name headerless columns from their shapes; None for a column that cannot be named for sure."""
    out: list[str | None] = []
    pct = watts = mib = 0
    n_mib = sum(1 for c in cells if split_unit(c)[1] == "MiB")
    for i, c in enumerate(cells):
        v, unit = split_unit(c)
        low = c.strip().lower()
        if _TS.match(c):
            out.append("timestamp")
        elif _UUID.match(c):
            out.append("uuid")
        elif low in RECOVERY:
            out.append("gpu_recovery_action")
        elif unit == "%":
            out.append(("utilization.gpu", "utilization.memory")[pct] if pct < 2 else None)
            pct += 1
        elif unit == "W":
            out.append(("power.draw", "power.limit")[watts] if watts < 2 else None)
            watts += 1
        elif unit == "MiB":
            out.append("memory.used" if n_mib == 1 else None)
            mib += 1
        elif (
            i == 0
            and is_number(c)
            and unit is None
            and float(v).is_integer()
            and float(v) < 64
            and len(cells) > 1
            and not all(is_number(x) for x in cells)
        ):
            out.append("index")
        elif not is_number(c) and not missing(c) and unit is None:
            out.append("name")
        else:
            out.append(None)
    if n_mib > 1:
        cap.note(
            f"no header: {n_mib} MiB columns cannot be told apart (total, free, used); memory not read "
            "(pass --fields with the --query-gpu list)",
            line=line,
            severity="warn",
        )
    if not any(f in ("utilization.gpu", "gpu_recovery_action", "uuid", "timestamp", "name", "power.draw") for f in out):
        raise UsageError(
            "CSV without a header and without units: its columns cannot be named; pass --fields "
            "with the --query-gpu/--query-compute-apps list",
            path=cap.meta.get("path"),
            line=line,
        )
    cap.note("no header line: columns named from their units", line=line)
    return out


def parse(text: str, *, path: str = "<capture>", fields: list[str] | None = None) -> Capture:
    cap = Capture(format="nvidia-smi-csv", meta={"path": path})
    lines = text.splitlines()
    names: list[str | None] | None = [ALIASES.get(f, f) for f in fields] if fields else None
    positional = 0  # GPUs without index/uuid: numbered by their row within a tick
    last_ts = object()
    section_rows = 0
    apps_headers = 0  # --query-compute-apps headers met (one with no rows: no process at capture time)
    n_data = [i for i, ln in enumerate(lines, 1) if ln.strip() and not is_header(ln)]
    last_line = n_data[-1] if n_data else 0
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if is_header(raw):
            names = [_field(c) for c in _split(raw)]
            apps_headers += "pid" in names
            positional, section_rows, last_ts = 0, 0, object()
            continue
        if "<=" in raw:  # an author's note pasted after the value ("Reset   <= GPU is unusable, ...")
            raw, note = raw.split("<=", 1)
            cap.note(f"text after '<=' ignored: {note.strip()!r} (an annotation, not nvidia-smi output)", line=i)
        cells = _split(raw)
        if names is None:
            names = infer_fields(cells, cap, i)
        if len(cells) != len(names):
            if i == last_line and len(cells) < len(names):
                cap.note(f"last row cut ({len(cells)} of {len(names)} fields): not used", line=i, severity="warn")
                continue
            raise UsageError(
                f"expected {len(names)} comma-separated fields (as the header), got {len(cells)}", path=path, line=i
            )
        row = dict(zip(names, cells))
        section_rows += 1
        if "pid" in row:
            _app_row(cap, row, path, i)
        else:
            positional, last_ts = _gpu_row(cap, row, path, i, positional, last_ts, cut=(i == last_line))
    if not cap.gpus and apps_headers and not n_data:
        cap.note("no process on any GPU at capture time (a --query-compute-apps header and no rows)", line=1)
        cap.meta["no_processes"] = True
        cap.snapshot = True
        return cap
    if not cap.gpus:
        raise UsageError("no GPU rows in the capture (only headers?)", path=path, line=max(1, len(lines)))
    cap.snapshot = all(len(g.util) <= 1 for g in cap.gpus.values())
    return cap


def _gpu_row(cap, row, path, i, positional, last_ts, *, cut):
    ts = _ts(row["timestamp"]) if row.get("timestamp") else None
    if "index" in row and not missing(row["index"]):
        key = index(row["index"], path=path, line=i, field="index")
    elif row.get("uuid") and not missing(row["uuid"]):
        key = row["uuid"]
        # a uuid seen in an earlier table with an index: the same GPU
        key = next((k for k, g in cap.gpus.items() if g.uuid == key), key)
    else:
        if ts is not None and ts != last_ts:
            positional = 0  # a new tick of an -l series: its first row is the first GPU again
        key = positional
        positional += 1
        if not cap.meta.get("positional_noted"):
            cap.meta["positional_noted"] = True
            cap.note("no index or uuid column: GPUs numbered by their row order", line=i)
    uuid = row.get("uuid")
    if isinstance(key, int) and uuid in cap.gpus:  # met first in a compute-apps table, by uuid
        old = cap.gpus.pop(uuid)
        old.key, old.index = key, key
        cap.gpus[key] = old
    g = cap.gpu(key, index=key if isinstance(key, int) else None)
    if row.get("uuid") and not missing(row["uuid"]):
        g.uuid = row["uuid"]
    if row.get("name"):
        g.name = row["name"]
    vals = {}
    for fld, attr in (("utilization.gpu", "util"), ("memory.used", "mem_used"), ("power.draw", "power")):
        if fld not in row:
            continue
        cell = row[fld]
        unit_cols = cap.meta.setdefault("unit_cols", set())
        if split_unit(cell)[1] is not None:
            unit_cols.add(fld)
        elif cut and is_number(cell) and fld in unit_cols:
            cap.note(
                f"last row may be cut: {fld} {cell!r} lost its unit; that value is not used",
                line=i,
                severity="warn",
                gpu=key,
            )
            continue
        v = number(cell, path=path, line=i, field=fld, hi=PERCENT if fld == "utilization.gpu" else MAX_VALUE)
        if v is None:
            what = missing(cell)
            if what in ("ERR!", "Unknown Error", "GPU is lost"):
                cap.note(
                    f"{fld} reads {cell.strip()} (often transient; a GPU that keeps it needs a look)",
                    severity="warn",
                    gpu=key,
                    line=i,
                )
        vals[attr] = v
    if vals or "timestamp" in row:
        g.add(t=ts, **vals)
    _scalars(cap, g, row, path, i, key)
    return positional, ts


def _scalars(cap, g, row, path, i, key) -> None:
    if row.get("memory.total"):
        g.mem_total = number(row["memory.total"], path=path, line=i, field="memory.total")
    for fld in ("power.limit", "enforced.power.limit", "power.max_limit"):
        if row.get(fld) and g.power_limit is None:
            g.power_limit = number(row[fld], path=path, line=i, field=fld)
    if row.get("mig.mode.current") and row["mig.mode.current"].strip().lower() == "enabled":
        g.mig = True
    if "gpu_recovery_action" in row:
        action = row["gpu_recovery_action"].strip()
        if action.lower() not in ("none", ""):
            cap.note(
                f"GPU {key}: gpu_recovery_action is {action}: the GPU needs this before it can be used",
                severity="fault",
                gpu=key,
                line=i,
            )


def _app_row(cap, row, path, i) -> None:
    mem_cell = row.get("used_gpu_memory", "")
    mem = number(mem_cell, path=path, line=i, field="used_gpu_memory") if mem_cell else None
    pid = row["pid"].strip()
    name = row.get("process_name")
    proc = {"pid": int(pid) if is_index(pid) else pid, "name": name, "used_mib": mem}
    uuid = row.get("gpu_uuid") or row.get("uuid")
    key = next((k for k, g in cap.gpus.items() if uuid and g.uuid == uuid), uuid or "?")
    g = cap.gpu(key, uuid=uuid)
    g.processes.append(proc)
    if name and missing(name) == "not found":
        cap.note(
            f"pid {pid} holds {mem:g} MiB but is not visible here ([Not Found]): another container's or a "
            "leftover process"
            if mem is not None
            else f"pid {pid} is not visible here ([Not Found])",
            severity="warn",
            gpu=key,
            line=i,
        )
    if mem_cell and missing(mem_cell) and not cap.meta.get("apps_na_noted"):
        cap.meta["apps_na_noted"] = True
        cap.note("per-process memory reads [N/A] (Windows WDDM or a restricted container): not observable", line=i)
