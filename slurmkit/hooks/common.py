"""What prolog and epilog share: run a profile of checks for the job, drain on failure, log every verdict."""
from __future__ import annotations

import os
import sys


def job_id(environ) -> int | None:
    v = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    return int(v) if v and v.isdigit() else None


def job_gpus(environ) -> list[int]:
    """The GPUs the job gets on this node: SLURM_JOB_GPUS (gres indices = device minor numbers), else
    CUDA_VISIBLE_DEVICES (the same in a prolog: no cgroup renumbering yet). A job without GPUs gets [] - never
    "all GPUs": a CPU job must not be refused over another job's processes on GPUs it does not use."""
    from ..health.runner import parse_gpu_list
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if environ.get(var, "").strip():
            return parse_gpu_list(environ[var]) or []
    return []


_UNSET = object()


def run_hook(profile: str, settings, environ, *, pre_records=(), checks=None, job_gpus=_UNSET,
             budget: float | None = None) -> tuple[object, str]:
    """Run `profile` ("prolog" | "epilog" | "health"), or only `checks` of it; returns (report, action). Appends
    every verdict to the health log. `job_gpus` None = all the node's GPUs (a health run: no job)."""
    from .. import healthlog
    from ..health.runner import node_name, run_checks

    node = environ.get("SLURMD_NODENAME") or node_name()
    jid = job_id(environ)
    gpus = globals()["job_gpus"](environ) if job_gpus is _UNSET else job_gpus
    report = run_checks(settings, profile, job_gpus=gpus, node=node, job_id=jid, subset=checks, budget=budget)
    action = "none"
    failed = report.failures[0] if report.failures else None
    if failed is not None:
        if settings.health.drain:
            from .. import drain
            action = drain.drain_node(settings, node, drain.reason_for_result(settings, failed))
        else:
            action = "not-drained (health.drain is false)"
    recs = list(pre_records)
    for r in report.results:
        # every verdict is logged; per-GPU detail only where it matters (warn/fail): an ok verdict keeps its
        # scalar evidence, so a busy node's log grows by a few hundred bytes a job, not kilobytes
        ev = r.evidence if r.status in ("warn", "fail") else \
            {k: v for k, v in r.evidence.items() if not isinstance(v, (list, dict))}
        recs.append(healthlog.record(check=r.check, status=r.status, reason=r.reason, evidence=ev,
                                     context=profile, node=node, job_id=jid,
                                     action=action if r is failed else "none", seconds=r.seconds,
                                     profile_seconds=round(report.seconds, 3)))
    try:
        healthlog.write(settings, recs)
    except OSError as e:
        print(f"slurmkit {profile}: cannot write the health log {settings.paths.health_log}: {e}", file=sys.stderr)
    if failed is not None:
        from .. import drain
        print(f"slurmkit {profile}: {drain.reason_for_result(settings, failed)} ({action})", file=sys.stderr)
    return report, action


def load_settings(profile: str):
    from ..errors import SlurmkitError
    from .settings_cache import load
    try:
        return load()
    except SlurmkitError as e:
        print(f"slurmkit {profile}: {e}", file=sys.stderr)
        return None


def fail_safe(profile: str, fn) -> int:
    """Run fn() -> exit code; an unexpected error exits 1 with one line on stderr (Slurm then drains with
    "<Prolog|Epilog> error": fail-closed, and visible)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the hook must say what broke, in one line, and never hang
        print(f"slurmkit {profile}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        if os.environ.get("SLURMKIT_DEBUG"):
            raise
        return 1
