"""The prolog entry point (prolog/prolog, a link to bin/slurmkit-hook, calls its `run()`).

Runs the prolog profile of checks on the job's GPUs; on a failure drains the node with a `slurmkit:<check>`
reason (never over an admin's) and exits 1 so Slurm requeues the job elsewhere. Every verdict goes to the health
log. Imports stay light: no click, jinja2 or paramiko (check with `python -X importtime -m slurmkit.hooks.prolog`).
"""

from __future__ import annotations

import os
import sys

from .common import fail_safe, load_settings, run_hook


def main() -> int:
    settings = load_settings("prolog")
    if settings is None:
        return 1
    report, _ = run_hook("prolog", settings, os.environ)
    # the job record the epilog's sync needs (issue 20.5); not for a root job, whose checkpoints the sync refuses
    # (no `scontrol show job` for it)
    if report.healthy and settings.sync.enabled and os.environ.get("SLURM_JOB_UID") != "0":
        from ..checkpoint.jobstate import remember

        remember(settings, os.environ)
    if report.healthy:
        from ..efficiency.hooks import start as start_efficiency_sampler  # issue 15: detached, never fails the job

        start_efficiency_sampler(settings, os.environ)
    return 0 if report.healthy else 1


def run() -> int:
    """What prolog/prolog (bin/slurmkit-hook) calls: main() with fail_safe's exit code."""
    return fail_safe("prolog", main)


if __name__ == "__main__":
    sys.exit(run())
