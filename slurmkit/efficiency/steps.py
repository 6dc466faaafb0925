"""`report_step(flops=..., tokens=...)`: a training loop tells slurmkit the model FLOPs of each step, for the
job's MFU (slurmkit/efficiency/mfu.py). Appends one `SLURMKIT_STEP` line to the job's step file; outside a Slurm
job it does nothing. Cheap (one small append), standard library only, never raises into the training loop.
"""

from __future__ import annotations

import os
import time


def report_step(
    flops: float, tokens: int | None = None, *, job_id: str | None = None, steps_dir: str | None = None
) -> bool:
    jid = job_id or os.environ.get("SLURM_JOB_ID")
    if not jid or not str(jid).isdigit():
        return False
    d = steps_dir or os.environ.get("SLURMKIT_STEPS_DIR") or "/tmp"
    line = (
        f"SLURMKIT_STEP t={time.time():.3f} flops={float(flops):.6g}"
        + (f" tokens={int(tokens)}" if tokens is not None else "")
        + "\n"
    )
    try:
        fd = os.open(
            os.path.join(d, f"slurmkit-steps.{jid}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600
        )
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def tee_step_lines(stream, flops_per_step: float | None, out=None) -> int:
    """`slurmkit run --flops-per-step N`: copy the child's stdout through unchanged, and report a step for each
    `SLURMKIT_STEP [flops=F] [tokens=T]` line (F defaults to N). Returns the steps reported."""
    import sys
    from .mfu import _KV

    out = out or sys.stdout.buffer
    n = 0
    for raw in iter(lambda: stream.readline(1 << 16), b""):
        try:
            out.write(raw)
            out.flush()
        except (OSError, ValueError):
            pass
        if b"SLURMKIT_STEP" in raw:
            kv = {}
            for k, v in _KV.findall(raw.decode("utf-8", "replace").split("SLURMKIT_STEP", 1)[1]):
                try:
                    kv[k] = float(v)
                except ValueError:
                    pass
            flops = kv.get("flops", flops_per_step)
            if flops is not None and flops >= 0:
                report_step(flops, int(kv["tokens"]) if "tokens" in kv else None)
                n += 1
    return n
