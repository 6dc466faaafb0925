"""The job-efficiency log: one JSON line per job per node, written by the epilog beside the health log.

    {"time", "job_id", "node", "user", "account", "partition", "nodelist", "start", "end", "seconds", "interval",
     "backend", "gpus": [per-GPU summary], "verdict", "gpu_hours", "gpu_hours_by_state": {"idle": ..}, "findings",
     "next_steps", "series": {"0": [util, ...]}, "stride", "mfu",
     "profiling": {"source": "dcgmi", "state": "ok" | "unavailable" | "off", "why"}}

Bounded: past efficiency.log_max_bytes the log is renamed to <log>.1 (one generation kept) before the append.
Standard library only (the epilog writes it).
"""

from __future__ import annotations

import json
import os
import time

from .model import Capture
from .verdict import Thresholds, summarize

from typing import TYPE_CHECKING
from ..hooks.common import job_nodelist
from ..times import utc_iso

if TYPE_CHECKING:
    from typing import Any

SERIES_POINTS = 240  # utilisation points kept per GPU in the record (for the sparkline and the plot)


def log_path(settings) -> str:
    """efficiency.log, else beside the health log in its layout: a per-node health-log directory gets a per-node
    `efficiency/` directory next to it (one writer per file, as the health log); a single health-log file gets
    `efficiency.jsonl` next to it."""
    from .. import healthlog

    explicit = settings.efficiency.log
    if explicit:
        return explicit
    hl = settings.paths.health_log
    if healthlog.per_node(hl):
        return os.path.join(os.path.dirname(hl.rstrip("/")) or ".", "efficiency") + "/"
    return os.path.join(os.path.dirname(hl) or ".", "efficiency.jsonl")


def load_samples(text: str) -> tuple[Capture, dict]:
    """The sampler's file -> (Capture, header). Torn or foreign lines are skipped (the sampler may be killed)."""
    cap = Capture(format="slurmkit-sampler")
    head: dict = {}
    end = None
    for ln in text.splitlines():
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        if isinstance(obj, list) and len(obj) in (5, 7) and isinstance(obj[1], int):
            t, idx, util, mem, pw = obj[:5]
            clk, why = obj[5:] or (None, None)  # 7: the SM clock and the clock event reasons bitmask too
            g = cap.gpu(idx, index=idx)
            g.add(t=t, util=util, mem_used=mem, power=pw, sm_clock=clk, reasons=why if isinstance(why, int) else None)
        elif isinstance(obj, list) and len(obj) == 6 and obj[2] == "dcgm" and isinstance(obj[1], int):
            cap.gpu(obj[1], index=obj[1]).add_profile(*obj[3:])
        elif isinstance(obj, dict):
            if "v" in obj and not head:
                head = obj
            elif "gpu" in obj and isinstance(obj["gpu"], int):
                g = cap.gpu(obj["gpu"], index=obj["gpu"])
                g.uuid, g.name = obj.get("uuid"), obj.get("name")
                g.power_limit, g.mem_total = obj.get("power_limit"), obj.get("mem_total")
            elif "end" in obj:
                end = obj
            elif "stride" in obj:
                head["stride"] = obj["stride"]
            elif obj.get("dcgm") == "ok":
                head["profiling"] = {"source": "dcgmi", "state": "ok"}
            elif obj.get("event") == "dcgm-unavailable":  # a node without DCGM: said, not a fault
                head["profiling"] = {"source": "dcgmi", "state": "unavailable", "why": obj.get("error")}
                cap.note(f"no SM/tensor activity: {obj.get('error')}")
            elif obj.get("event"):
                cap.note(f"sampler: {obj['event']} {obj.get('error') or obj.get('rc') or ''}".strip(), severity="warn")
    for i in head.get("gpus", []):  # a GPU the job holds that never answered is unknown, not absent
        cap.gpu(i, index=i)
    cap.interval = (head.get("interval") or 0) * head.get("stride", 1) or None
    if end:
        head["end_reason"] = end.get("why")
    return cap, head


def _profiling(head: dict) -> dict:
    if head.get("profiling"):
        return head["profiling"]
    if head.get("dcgm"):
        return {"source": "dcgmi", "state": "unavailable", "why": "dcgmi gave no sample before the sampler stopped"}
    return {"source": "dcgmi", "state": "off", "why": "efficiency.profiling is off"}


def _downsample(vals: list, n: int = SERIES_POINTS) -> list:
    if len(vals) <= n:
        return vals
    step = len(vals) / n
    out = []
    for i in range(n):
        b = [v for v in vals[int(i * step) : int((i + 1) * step)] if v is not None]
        out.append(round(sum(b) / len(b), 1) if b else None)
    return out


def build(
    cap: Capture, head: dict, th: Thresholds, *, environ, node: str, end: float | None = None, mfu: dict | None = None
) -> dict:
    end = end or time.time()
    start = head.get("start") or end
    seconds = max(0.0, end - start)
    doc = summarize(cap, th)
    n = len(doc["gpus"])
    by_state: dict[str, float] = {}
    for g in doc["gpus"]:
        by_state[g["state"]] = round(by_state.get(g["state"], 0.0) + seconds / 3600.0, 6)
    rec = {
        "time": utc_iso(end),
        "job_id": head.get("job_id"),
        "node": node,
        "user": environ.get("SLURM_JOB_USER"),
        "account": environ.get("SLURM_JOB_ACCOUNT"),
        "partition": environ.get("SLURM_JOB_PARTITION"),
        "nodelist": job_nodelist(environ),  # the job's nodes: the straggler check finds its peers from them
        "start": round(start, 3),
        "end": round(end, 3),
        "seconds": round(seconds, 3),
        "interval": cap.interval,
        "backend": head.get("backend"),
        "stride": head.get("stride", 1),
        "sampler_end": head.get("end_reason"),
        "profiling": _profiling(head),
        "gpus": doc["gpus"],
        "verdict": doc["verdict"],
        "gpu_hours": round(n * seconds / 3600.0, 6),
        "gpu_hours_by_state": by_state,
        "findings": doc["findings"],
        "next_steps": doc["next_steps"],
        "series": {str(k): _downsample(g.util) for k, g in cap.gpus.items()},
        "mfu": mfu,
    }
    return rec


def append(path: str, rec: dict, max_bytes: int) -> None:
    """Append the record in the log's layout (healthlog's JSON lines: one locked append, rotated first when too
    big, one generation kept)."""
    from .. import healthlog

    healthlog.append(path, rec, max_bytes=max_bytes, keep=1)


def read(path: str, *, since: float | None = None):
    """Records of the log and its previous generation, oldest first (per node in the per-node layout); torn lines
    skipped; with `since`, those that ended then or later."""
    from .. import healthlog

    for rec in healthlog.read(path):
        if since is None or (rec.get("end") or 0) >= since:
            yield rec


def report_for_job(settings, job_id: int, *, node: str | None = None, thresholds: Thresholds | None = None):
    """The `efficiency JOBID` report from the log: every node's record of the job, GPUs keyed node:index when
    the job ran on several nodes."""
    from ..errors import SlurmkitError

    path = log_path(settings)
    recs = [r for r in read(path) if r.get("job_id") == job_id and (node is None or r.get("node") == node)]
    if not recs:
        raise SlurmkitError(
            f"no efficiency record for job {job_id} in {path} (the epilog writes it when the job "
            "ends on a node with slurmkit's prolog/epilog; a job still running has none yet)"
        )
    latest: dict[str, dict] = {}
    for r in recs:
        latest[r.get("node")] = r  # a requeued job: the newest record per node
    multi = len(latest) > 1
    gpus: list[dict] = []
    series: dict[Any, Any] = {}  # "node:gpu" keys across nodes, else the GPU index
    findings: list[dict] = []
    steps: list[dict] = []
    for nd, r in latest.items():
        for g in r["gpus"]:
            g = dict(g)
            if multi:
                g["index"] = f"{nd}:{g['index']}"
            gpus.append(g)
        for k, v in (r.get("series") or {}).items():
            key = f"{nd}:{k}" if multi else (int(k) if k.isdigit() else k)
            series[key] = v
        findings += r.get("findings") or []
        steps += r.get("next_steps") or []
    from .straggler import find
    from .verdict import job_verdict

    stragglers = find(latest, settings.efficiency.straggler_margin_pct)
    findings += [{"severity": "warn", "gpu": None, "line": None, "text": x["text"]} for x in stragglers]
    first = next(iter(latest.values()))
    doc = {
        "job": {
            "job_id": job_id,
            "node": ",".join(latest),
            "user": first.get("user"),
            "account": first.get("account"),
            "partition": first.get("partition"),
            "seconds": max(r.get("seconds") or 0 for r in latest.values()),
            "gpu_hours": round(sum(r.get("gpu_hours") or 0 for r in latest.values()), 6),
        },
        "gpus": gpus,
        "verdict": job_verdict([g["state"] for g in gpus]),
        "findings": findings,
        "next_steps": steps,
        "mfu": first.get("mfu"),
        "records": len(recs),
        "stragglers": stragglers,
        "profiling": first.get("profiling"),
    }
    return doc, series
