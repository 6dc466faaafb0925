"""What prolog and epilog share: run a profile of checks for the job, drain on failure, log every verdict."""
from __future__ import annotations

import os
import sys


def job_id(environ) -> int | None:
    v = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    return int(v) if v and v.isdigit() else None


def job_gpus(environ):
    from ..health.runner import parse_gpu_list
    # SLURM_JOB_GPUS: the node's GPU indices given to the job (what nvidia-smi numbers); CUDA_VISIBLE_DEVICES
    # as a fallback (the same in a prolog, where no cgroup renumbering has happened)
    return parse_gpu_list(environ.get("SLURM_JOB_GPUS")) if environ.get("SLURM_JOB_GPUS") is not None \
        else parse_gpu_list(environ.get("CUDA_VISIBLE_DEVICES"))


def run_hook(profile: str, settings, environ, *, pre_records=()) -> tuple[object, str]:
    """Run `profile` ("prolog" | "epilog"); returns (report, action). Appends every verdict to the health log."""
    from .. import healthlog
    from ..health.runner import node_name, run_checks

    node = environ.get("SLURMD_NODENAME") or node_name()
    jid = job_id(environ)
    report = run_checks(settings, profile, job_gpus=job_gpus(environ), node=node, job_id=jid)
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
        recs.append(healthlog.record(check=r.check, status=r.status, reason=r.reason, evidence=r.evidence,
                                     context=profile, node=node, job_id=jid,
                                     action=action if r is failed else "none", seconds=r.seconds))
    try:
        healthlog.append(settings.paths.health_log, recs)
    except OSError as e:
        print(f"slurmkit {profile}: cannot write the health log {settings.paths.health_log}: {e}", file=sys.stderr)
    if failed is not None:
        from .. import drain
        print(f"slurmkit {profile}: {drain.reason_for_result(settings, failed)} ({action})", file=sys.stderr)
    return report, action


def load_settings(profile: str):
    from .. import config
    from ..errors import SlurmkitError
    try:
        return config.load()
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
