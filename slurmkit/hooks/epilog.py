"""The epilog entry point (epilog/epilog runs `python -I -m slurmkit.hooks.epilog`).

Order matters: the checkpoint sync runs FIRST, so a failing health verdict never loses a job's checkpoints.
Then the epilog profile (Xid since the job started, ECC, processes left on the job's GPUs after a grace period);
on a failure the node is drained with a `slurmkit:<check>` reason (the etiquette) and the epilog still exits 0:
the node is drained with a reason that says why, instead of Slurm's bare "Epilog error". It exits 1 only when it
could not drain a failing node, so Slurm drains it anyway.
"""
from __future__ import annotations

import os
import sys

from .common import fail_safe, job_id, load_settings, run_hook


def checkpoint_sync(settings, environ) -> list[dict]:
    """>>> CALL POINT (issue 5): checkpoint sync, before any verdict. Returns health-log records."""
    from .. import healthlog
    node = environ.get("SLURMD_NODENAME")
    try:
        from ..checkpoint.sync import sync_for_job  # lazily: the epilog stays light when sync has nothing to do
    except ImportError:
        return [healthlog.record(check="checkpoint_sync", status="skip", context="sync", node=node,
                                 job_id=job_id(environ), reason="slurmkit.checkpoint.sync not installed yet",
                                 action="none")]
    try:
        out = sync_for_job(settings, environ) or {}
        return [healthlog.record(check="checkpoint_sync", status=str(out.get("status", "ok")), context="sync",
                                 node=node, job_id=job_id(environ), reason=str(out.get("reason", "")),
                                 evidence=out, action=str(out.get("action", "synced")))]
    except Exception as e:  # noqa: BLE001 - a failed sync must not stop the health verdict
        return [healthlog.record(check="checkpoint_sync", status="fail", context="sync", node=node,
                                 job_id=job_id(environ), reason=f"{type(e).__name__}: {e}", action="none")]


def main() -> int:
    settings = load_settings("epilog")
    if settings is None:
        return 1
    pre = checkpoint_sync(settings, os.environ)
    report, action = run_hook("epilog", settings, os.environ, pre_records=pre)
    if report.healthy:
        return 0
    return 1 if action.startswith("drain-failed") else 0


if __name__ == "__main__":
    sys.exit(fail_safe("epilog", main))
