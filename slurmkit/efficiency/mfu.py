"""Model FLOPs utilisation: achieved FLOP/s / (GPUs x the GPU's peak dense BF16), the peak from
slurmkit/data/gpu_peaks.json (datasheet figures, each with its source).

A job reports its model FLOPs through `slurmkit.efficiency.steps.report_step(flops=...)` (re-exported as
`slurmkit.checkpoint.report_step`), which appends `SLURMKIT_STEP t=... flops=... tokens=...` lines to the job's step
file; the epilog reads that file (a regular file owned by the job's user, opened without following links, bounded)
and puts the MFU in the job record. Standard library only.
"""

from __future__ import annotations

import re
import json
import os


_STEP = re.compile(r"SLURMKIT_STEP\b(.*)$")
_KV = re.compile(r"(\w+)=([0-9.eE+-]+)")
STEPS_MAX_BYTES = 4 << 20


def peaks() -> list[dict]:
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gpu_peaks.json")
    with open(here, encoding="utf-8") as f:
        return json.load(f)["models"]


def peak_for(name: str | None) -> dict | None:
    if not name:
        return None
    best = None
    for m in peaks():
        for pat in m["match"]:
            if pat.lower() in name.lower() and (best is None or len(pat) > best[0]):
                best = (len(pat), m)
    return best[1] if best else None


def parse_steps(text: str) -> list[dict]:
    """`SLURMKIT_STEP t=1733050000.5 flops=1.2e15 tokens=4096` lines (anywhere in a line, e.g. after a log
    prefix) -> [{"t", "flops", "tokens"}]; other lines and unreadable values are skipped."""
    out = []
    for ln in text.splitlines():
        m = _STEP.search(ln)
        if not m:
            continue
        kv = {}
        for k, v in _KV.findall(m.group(1)):
            try:
                kv[k] = float(v)
            except ValueError:
                continue
        if "flops" in kv and kv["flops"] >= 0:
            out.append(kv)
    return out


def compute(steps: list[dict], *, n_gpus: int, gpu_name: str | None, seconds: float | None) -> dict | None:
    """MFU from step reports: the FLOPs between the first and last report over that time (or over the job's
    `seconds` when the steps carry no times)."""
    if not steps or n_gpus <= 0:
        return None
    peak = peak_for(gpu_name)
    ts = [s["t"] for s in steps if "t" in s]
    if len(ts) >= 2 and max(ts) > min(ts):
        flops = sum(s["flops"] for s in steps[1:])  # the first report marks the start of the window
        span = max(ts) - min(ts)
    else:
        flops, span = sum(s["flops"] for s in steps), seconds
    out = {
        "steps": len(steps),
        "flops": flops,
        "seconds": span,
        "gpus": n_gpus,
        "gpu": gpu_name,
        "tokens": sum(s.get("tokens", 0) for s in steps) or None,
        "mfu_pct": None,
    }
    if not span:
        out["detail"] = "no time span to divide by"
        return out
    achieved = flops / span
    out["achieved_tflops"] = round(achieved / 1e12, 3)
    if peak is None:
        out["detail"] = f"no peak figure for {gpu_name!r} in gpu_peaks.json"
        return out
    out["peak_bf16_dense_tflops_per_gpu"] = peak["bf16_dense_tflops"]
    out["peak_source"] = peak["source"]
    out["mfu_pct"] = round(100.0 * achieved / (n_gpus * peak["bf16_dense_tflops"] * 1e12), 2)
    out["detail"] = (
        f"{out['achieved_tflops']:g} TFLOP/s over {n_gpus} x {peak['model']} "
        f"({peak['bf16_dense_tflops']:g} dense BF16 TFLOP/s each)"
    )
    return out


def steps_path(job_id, steps_dir: str = "/tmp") -> str:
    return os.path.join(steps_dir, f"slurmkit-steps.{job_id}")


def read_steps_file(path: str, uid: int | None) -> str:
    """The job's step file: a regular file owned by the job's user, never through a link, at most 4 MiB."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
            return ""
        return os.read(fd, STEPS_MAX_BYTES).decode("utf-8", "replace")
    finally:
        os.close(fd)


def for_record(settings, rec: dict, environ) -> dict | None:
    """The epilog: MFU for the job record from the job's step file (then removed), or None."""
    jid = rec.get("job_id")
    steps_dir = settings.efficiency.steps_dir or "/tmp"
    path = steps_path(jid, steps_dir)
    uid = environ.get("SLURM_JOB_UID")
    text = read_steps_file(path, int(uid) if uid and uid.isdigit() else None)
    if not text:
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    names = [g.get("name") for g in rec.get("gpus") or [] if g.get("name")]
    return compute(
        parse_steps(text),
        n_gpus=len(rec.get("gpus") or []),
        gpu_name=names[0] if names else None,
        seconds=rec.get("seconds"),
    )
