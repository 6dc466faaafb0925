"""The epilog entry point (epilog/epilog, a link to bin/slurmkit-hook, calls its `run()`).

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
    """The checkpoint sync (slurmkit.checkpoint.sync), before any verdict.

    sync_for_job never raises and appends its own health-log record (context "sync"); this returns records only for
    what it cannot say itself: a sync module that does not import, or an exception escaping it anyway.
    """
    if not settings.sync.enabled:
        return []
    from .. import healthlog

    node = environ.get("SLURMD_NODENAME")
    try:
        from ..checkpoint.patterns import source_absent

        if source_absent(settings.sync.source, environ):
            # most jobs write no checkpoints: no sync to run (none of its imports, no child), as sync_for_job
            # would find ("nothing": no record); only the prolog's record of the job is dropped
            from ..checkpoint.jobstate import forget

            forget(settings, environ.get("SLURM_JOB_ID") or "")
            return []
        from ..checkpoint.sync import sync_for_job  # lazily: only when the site syncs checkpoints

        sync_for_job(settings, environ)  # the hooks' cached settings do: no YAML on this path
        return []
    except Exception as e:  # noqa: BLE001 - a broken sync must not stop the health verdict
        return [
            healthlog.record(
                check="checkpoint-sync",
                status="fail",
                context="sync",
                node=node,
                job_id=job_id(environ),
                reason=f"checkpoint sync failed: {type(e).__name__}: {e}",
                action="none",
            )
        ]


def main() -> int:
    settings = load_settings("epilog")
    if settings is None:
        return 1
    from ..efficiency.hooks import stop as stop_efficiency_sampler  # issue 15: first, before idle samples pile up

    stop_efficiency_sampler(settings, os.environ)
    pre = checkpoint_sync(settings, os.environ)
    report, action = run_hook("epilog", settings, os.environ, pre_records=pre)
    if report.healthy:
        return 0
    return 1 if action.failed else 0


def run() -> int:
    """What epilog/epilog (bin/slurmkit-hook) calls: main() with fail_safe's exit code."""
    return fail_safe("epilog", main)


if __name__ == "__main__":
    sys.exit(run())
