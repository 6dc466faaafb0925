"""The default `nvidia-smi` table (a snapshot: utilisation, memory, power and its cap per GPU) and the job
reports sites already have: Princeton `jobstats` (text and `-j` JSON / AdminComment), `seff`, `sacct -P`."""

from __future__ import annotations

import json
import re

from ..errors import UsageError
from .cells import MAX_VALUE, PERCENT, index, is_index, missing, number
from .model import Capture

_BUS = re.compile(r"\s*[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_METRICS = re.compile(r"^\|\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)")


def _gpu_line(ln: str) -> tuple[str, str] | None:
    """`|   0  NVIDIA H100 80GB HBM3     On  |   00000000:18:00.0 Off |` -> ('0', 'NVIDIA H100 80GB HBM3'), read by
    cells (a lazy regex over the name backtracked quadratically over a long run of blanks)."""
    if not ln.startswith("|") or ln.count("|") < 3:
        return None
    first, second = ln.split("|", 3)[1:3]
    words = first.split()
    if not first[:1].isspace() or len(words) < 3 or not words[0].isdigit() or words[-1] not in ("On", "Off"):
        return None
    if not _BUS.match(second):
        return None
    return words[0], " ".join(words[1:-1])


def parse_table(text: str, *, path: str = "<capture>") -> Capture:
    cap = Capture(format="nvidia-smi-table", snapshot=True)
    lines = text.splitlines()
    current = None
    for i, ln in enumerate(lines, 1):
        gpu_line = _gpu_line(ln)
        if gpu_line:
            idx = index(gpu_line[0], path=path, line=i, field="GPU")
            current = cap.gpu(idx, index=idx, name=gpu_line[1])
            continue
        m = _METRICS.match(ln)
        if m and current is not None and not current.util:
            _fan, _temp, _perf, pwr, cap_w, used, total, util = m.groups()
            current.power_limit = number(cap_w, path=path, line=i, field="power cap")
            current.mem_total = number(total, path=path, line=i, field="memory total")
            p = number(pwr, path=path, line=i, field="power")
            if missing(pwr):
                cap.note(
                    f"GPU {current.key}: power reads {pwr} (often transient, e.g. azhpc-diagnostics #77; one "
                    "that stays needs a look)",
                    severity="warn",
                    gpu=current.key,
                    line=i,
                )
            current.add(
                util=number(util, path=path, line=i, field="GPU-Util", hi=PERCENT),
                power=p,
                mem_used=number(used, path=path, line=i, field="memory used"),
            )
    if not cap.gpus:
        raise UsageError("no GPU rows found in the nvidia-smi table", path=path, line=1)
    for g in cap.gpus.values():
        if not g.util:
            raise UsageError(f"GPU {g.key}: its metrics line (power / memory / utilisation) is missing", path=path)
    return cap


def parse_jobstats_json(text: str, *, path: str = "<capture>") -> Capture:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"not JSON: {e.msg}", path=path, line=e.lineno) from None
    except ValueError as e:  # an integer of more than 4,300 digits: int() refuses it, json says so as a ValueError
        raise UsageError(f"not JSON slurmkit can read: {e}", path=path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), dict):
        raise UsageError("not a jobstats summary: no 'nodes' mapping", path=path, line=1)
    cap = Capture(format="jobstats-json", snapshot=True)
    cap.meta["total_time_s"] = doc.get("total_time")
    for node, rec in doc["nodes"].items():
        if not isinstance(rec, dict):
            raise UsageError(f"nodes.{node}: expected a mapping", path=path)
        util, used, total = (_json_map(rec, k, node, path) for k in _JS_KEYS)
        for gid in sorted(set(util) | set(used) | set(total), key=str):
            key = f"{node}:{gid}" if len(doc["nodes"]) > 1 else (int(gid) if is_index(str(gid)) else gid)
            g = cap.gpu(key, index=int(gid) if is_index(str(gid)) and len(doc["nodes"]) == 1 else None)
            where = f"nodes.{node}"
            g.add(
                util=_json_number(util, gid, f"{where}.gpu_utilization", path, PERCENT),
                mem_used=_mib(_json_number(used, gid, f"{where}.gpu_used_memory", path, MAX_VALUE * 2**20)),
            )
            g.mem_total = _mib(_json_number(total, gid, f"{where}.gpu_total_memory", path, MAX_VALUE * 2**20))
            if gid not in util:
                g.mig = True
                cap.note(
                    f"GPU {key}: jobstats has no gpu_utilization (a MIG slice cannot report it): n/a, not 0 %", gpu=key
                )
    cap.note("jobstats summary: one mean per GPU over the whole job, not samples")
    if not cap.gpus:
        raise UsageError("jobstats summary without GPUs", path=path, line=1)
    return cap


_JS_KEYS = ("gpu_utilization", "gpu_used_memory", "gpu_total_memory")


def _json_map(rec: dict, key: str, node: str, path: str) -> dict:
    v = rec.get(key) or {}
    if not isinstance(v, dict):
        raise UsageError(f"nodes.{node}.{key}: expected a mapping of GPU -> number", path=path)
    return v


def _json_number(m: dict, gid, field: str, path: str, hi: float) -> float | None:
    """A number from a jobstats JSON mapping: a JSON number in 0..hi (not a string, not a boolean), else exit 2."""
    if gid not in m:
        return None
    v = m[gid]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:20] + "..."
        raise UsageError(f"{field}.{gid}: expected a number from 0 to {hi:g}, got {shown}", path=path)
    return float(v)


def _mib(v: float | None) -> float | None:
    return None if v is None else v / 2**20


_JS_UTIL = re.compile(r"^\s*(\S+) \(GPU (\d+)\): ([\d.]+)%\s*$")
_JS_MEM = re.compile(r"^\s*(\S+) \(GPU (\d+)\): ([\d.]+)GB/([\d.]+)GB")
# matched against the stripped line: `(.*?)\s*$` backtracked quadratically over a long run of blanks
_KV = re.compile(r"([A-Za-z /-]+):\s+(.*)")


def parse_jobstats_text(text: str, *, path: str = "<capture>") -> Capture:
    cap = Capture(format="jobstats", snapshot=True)
    section = None
    nodes = set()
    for i, ln in enumerate(text.splitlines(), 1):
        s = ln.strip()
        if s.startswith("GPU utilization per node"):
            section = "util"
            continue
        if s.startswith("GPU memory usage per node"):
            section = "mem"
            continue
        if not s or s.startswith("=") or s.startswith("CPU "):
            section = None if not s else section
        m = _JS_UTIL.match(ln) if section == "util" else _JS_MEM.match(ln) if section == "mem" else None
        if m:
            node, gid = m.group(1), index(m.group(2), path=path, line=i, field="GPU")
            nodes.add(node)
            g = cap.gpu(f"{node}:{gid}")
            if section == "util":
                g.add(util=number(m.group(3), path=path, line=i, field="GPU utilization", hi=PERCENT))
            else:
                gb = number(m.group(4), path=path, line=i, field="GPU memory total", hi=MAX_VALUE / 1024)
                g.mem_total = None if gb is None else gb * 1024
                if g.mem_used:
                    gb = number(m.group(3), path=path, line=i, field="GPU memory used", hi=MAX_VALUE / 1024)
                    g.mem_used[-1] = None if gb is None else gb * 1024
            continue
        kv = _KV.match(ln.strip())
        if kv and kv.group(1).strip() in ("Job ID", "State", "GPUs", "Run Time", "User/Account", "NetID/Account"):
            cap.meta[kv.group(1).strip()] = kv.group(2)
    if not cap.gpus:
        raise UsageError("a jobstats report without 'GPU utilization per node' lines", path=path, line=1)
    if len(nodes) == 1:  # one node: key by the GPU index alone, as the other formats do
        cap.gpus = {int(str(g.key).rsplit(":", 1)[1]): g for g in cap.gpus.values()}
        for k, g in cap.gpus.items():
            g.key = g.index = k
    if "RUNNING" in cap.meta.get("State", ""):
        cap.note("the job is still running: the figures are so far")
    cap.note("jobstats report: one mean per GPU over the job, not samples")
    return cap


def parse_seff(text: str, *, path: str = "<capture>") -> Capture:
    cap = Capture(format="seff", snapshot=True)
    for ln in text.splitlines():
        kv = _KV.match(ln.strip())
        if kv:
            cap.meta[kv.group(1).strip()] = kv.group(2)
    if "Job ID" not in cap.meta:
        raise UsageError("not seff output: no 'Job ID:' line", path=path, line=1)
    cap.note(
        "seff reports CPU and memory only: no GPU data (run slurmkit efficiency JOBID on a slurmkit node)",
        severity="warn",
    )
    if "WARNING" in text and "RUNNING" in text:
        cap.note("seff: the job is RUNNING, its efficiency figures are not final")
    return cap


def parse_sacct(text: str, *, path: str = "<capture>") -> Capture:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise UsageError("empty sacct output", path=path, line=1)
    cols = lines[0].split("|")
    if "JobID" not in cols:
        raise UsageError("not sacct -P output: no JobID column", path=path, line=1)
    cap = Capture(format="sacct", snapshot=True)
    jobs = {}
    for i, ln in enumerate(lines[1:], 2):
        cells = ln.split("|")
        if len(cells) != len(cols):
            raise UsageError(f"expected {len(cols)} '|'-separated fields, got {len(cells)}", path=path, line=i)
        row = dict(zip(cols, cells))
        if "." in row["JobID"]:
            continue
        tres = dict(t.split("=", 1) for t in row.get("AllocTRES", "").split(",") if "=" in t)
        gpus = {k: v for k, v in tres.items() if k.startswith("gres/gpu")}
        jobs[row["JobID"]] = gpus
    cap.meta["jobs"] = jobs
    cap.note(
        "sacct gives what a job was allocated (AllocTRES), not how it used it: no GPU utilisation", severity="warn"
    )
    return cap
