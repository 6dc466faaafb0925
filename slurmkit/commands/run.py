from __future__ import annotations

import os

import click

from .ctx import Ctx, pass_ctx


@click.command(context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False})
@click.option(
    "--signal",
    "trigger",
    metavar="SIG",
    help="The signal Slurm sends before the time limit or at "
    "preemption (match sbatch --signal=B:SIG@LEAD). Default: run.signal (USR2).",
)
@click.option(
    "--checkpoint-signal",
    metavar="SIG|none",
    help="What the child gets when asked to checkpoint; "
    "'none': only the flag file $SLURMKIT_STOP_FILE. Default: run.checkpoint_signal (TERM).",
)
@click.option(
    "--grace",
    type=float,
    metavar="SECONDS",
    help="How long the child may take to checkpoint and exit before the requeue. Default: run.grace (60).",
)
@click.option(
    "--max-requeues",
    type=int,
    metavar="N",
    help="Requeue only while SLURM_RESTART_COUNT < N. Default: run.max_requeues (10).",
)
@click.option(
    "--checkpoint-dir",
    metavar="DIR",
    help="Where the job's checkpoints live: logs the step it resumes "
    "at and exports $SLURMKIT_CHECKPOINT_DIR to the child.",
)
@click.option(
    "--durable",
    metavar="DEST",
    help="Replicate each complete checkpoint of --checkpoint-dir to DEST (a path or s3://) during the job, "
    "and restore DEST's newest to --checkpoint-dir before COMMAND starts when it is newer. Default: run.durable.",
)
@click.option(
    "--imds-endpoint",
    metavar="URL",
    help="Watch AWS spot interruption notices at this IMDS endpoint "
    "(e.g. http://169.254.169.254). Default: run.imds_endpoint (off).",
)
@click.option("--imds-poll", type=float, metavar="SECONDS", help="Seconds between IMDS polls (run.imds_poll_interval).")
@click.option(
    "--flops-per-step",
    type=click.FloatRange(min=0, min_open=True),
    metavar="N",
    help="Model FLOPs of one training step, for the job's MFU: each SLURMKIT_STEP line the command prints "
    "on stdout is a step (its own flops= wins); the epilog puts the MFU in the job's efficiency record.",
)
@click.option("--no-requeue", is_flag=True, help="Ask the child to checkpoint, but never requeue.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Run the command and handle signals, but only say when it would requeue (no scontrol requeue).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def run(
    ctx: Ctx,
    trigger,
    checkpoint_signal,
    grace,
    max_requeues,
    checkpoint_dir,
    durable,
    imds_endpoint,
    imds_poll,
    flops_per_step,
    no_requeue,
    dry_run,
    command,
):
    """Run COMMAND as a Slurm job that checkpoints and requeues itself on timeout, preemption or a spot notice.

    Use it in the sbatch script: `exec slurmkit run -- python train.py` (submitted with --signal=B:USR2@LEAD and
    --requeue). Exits with COMMAND's exit code. Settings: the `run:` section of the site config.
    """
    from ..errors import UsageError
    from ..run import RunOptions, Runner
    from ..signals import signum

    for what, val, none_ok in (("--signal", trigger, False), ("--checkpoint-signal", checkpoint_signal, True)):
        if val is None or (none_ok and val.strip().lower() == "none"):
            continue
        try:
            signum(val)
        except (KeyError, ValueError):
            raise UsageError(f"{what}: unknown signal {val!r} (e.g. USR2, TERM)") from None
    from ..config import TRIGGER_FORBIDDEN

    if trigger and trigger.strip().upper().removeprefix("SIG") in TRIGGER_FORBIDDEN:
        raise UsageError(
            f"--signal: {trigger} cannot be the trigger (scancel and the time limit send TERM, and a "
            "cancelled job must never requeue); use USR2"
        )
    if grace is not None and grace < 0:
        raise UsageError("--grace must be >= 0")
    rs = ctx.settings.run
    from ..jobs.ckpaths import PathError, expand

    try:  # issue 29: {job_id}, {array_task_id}, ... and $VARIABLEs, from this job's variables
        checkpoint_dir = expand(checkpoint_dir, dict(os.environ)) if checkpoint_dir else checkpoint_dir
        where = durable or rs.durable
        durable = expand(where, dict(os.environ)) if where else None
    except PathError as e:
        raise UsageError(f"--checkpoint-dir/--durable: {e}") from None
    opts = RunOptions.from_settings(
        rs,
        signal=trigger,
        checkpoint_signal=checkpoint_signal,
        grace=grace,
        max_requeues=max_requeues,
        imds_endpoint=imds_endpoint,
        imds_poll_interval=imds_poll,
        checkpoint_dir=checkpoint_dir,
        durable=durable,
        dry_run=dry_run,
        flops_per_step=flops_per_step,
    )
    if no_requeue:
        opts.requeue_on = []
    from ..run.nodefault import node_findings

    settings = ctx.settings
    runner = Runner(
        list(command),
        opts,
        backend_factory=ctx.backend,
        node_probe=lambda: node_findings(settings, os.environ.get("SLURM_JOB_ID")),
    )
    return runner.run()
