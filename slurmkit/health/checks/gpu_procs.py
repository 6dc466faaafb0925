"""gpu_procs: processes or memory left on the GPUs the job is about to get (prolog) or just had (epilog, after
`gpu_procs.grace_seconds` for the job's own processes to leave). Input: `nvidia-smi -q` text."""

from __future__ import annotations

import time

from .. import nvsmi
from ..base import Result, live_unreadable, to_int
from ..context import NoData

NAME = "gpu_procs"


def evaluate(text: str, job_gpus, s) -> Result:
    q = nvsmi.parse_q(text)
    if not q["gpus"]:
        if q["errors"]:
            return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code="gpu_procs")
        raise NoData("no GPUs in this input (expected `nvidia-smi -q` output)")
    if not any(
        g["tree"].get_ci("Processes") is not None or g["tree"].get_ci("FB Memory Usage") is not None for g in q["gpus"]
    ):
        raise NoData("no Processes / FB Memory Usage section in this input (expected `nvidia-smi -q` output)")
    findings, per, blind = [], [], []
    for n, g in enumerate(q["gpus"]):
        t = g["tree"]
        # Slurm numbers GPUs by device minor (/dev/nvidiaN), which need not follow nvidia-smi's PCI order
        minor = to_int(t.get_ci("Minor Number"))
        i = minor if minor is not None else n
        if job_gpus is not None and i not in job_gpus:
            continue
        gid = f"{i} ({nvsmi.short_bus(g['bus_id']) or '?'})"
        procs = nvsmi.processes(t)
        used = to_int(t.get_ci("FB Memory Usage", "Used"))
        block = t.get_ci("Processes")
        per.append({"gpu": i, "bus_id": g["bus_id"], "processes": procs, "used_mib": used})
        if not procs and used is None and not (isinstance(block, str) and block.strip().lower() == "none"):
            blind.append(gid)  # no process list and no memory figure: nothing to judge by
            continue
        if procs:
            findings.append(f"GPU {gid}: " + ", ".join(f"pid {p['pid']} ({p['name'] or '?'})" for p in procs))
        elif used is not None and used > s.max_memory_mib:
            findings.append(f"GPU {gid}: {used} MiB used with no process")
    ev = {"gpus": per, "job_gpus": job_gpus}
    if findings:
        ev["findings"] = findings
        return Result(NAME, "fail", "left on the GPU: " + "; ".join(findings), ev, code="gpu_procs")
    if blind and len(blind) == len(per):
        raise NoData("no readable process list or memory use in this input (N/A)")
    if blind:
        ev["unreadable"] = blind
        return Result(NAME, "warn", f"processes and memory use unreadable (N/A) on GPU {', '.join(blind)}", ev)
    return Result(NAME, "ok", f"{len(per)} GPUs free", ev)


def unknown_gpus(res: Result) -> Result:
    """The epilog did not know the job's GPUs (no SLURM_JOB_GPUS: the job record was lost): all of the node's
    GPUs were checked. What is left there may be another job's, so it is a warning (never a drain over someone
    else's job), and a pass says it covered all GPUs, never "0 GPUs free"."""
    note = "the job's GPUs are unknown (no SLURM_JOB_GPUS), all GPUs checked"
    res.evidence["job_gpus_unknown"] = True
    if res.status == "fail":
        return Result(NAME, "warn", f"{res.reason} ({note})", res.evidence)
    if res.status == "ok":
        res.reason = f"{res.reason} ({note})"
    return res


def _read(ctx, *, fresh: bool = False) -> Result:
    text = ctx.text(NAME, "q", fresh=fresh)
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.job_gpus, ctx.settings.gpu_procs)


def run(ctx) -> Result:
    res = _read(ctx)
    if ctx.profile == "epilog" and ctx.live and res.status == "fail" and "unreadable" not in res.evidence:
        deadline = time.monotonic() + ctx.settings.gpu_procs.grace_seconds
        while res.status == "fail" and time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            res = _read(ctx, fresh=True)
    if ctx.profile == "epilog" and ctx.job_gpus is None and ctx.job_id is not None:
        res = unknown_gpus(res)
    return res
