"""`slurmkit cancel`: end a job (or jobs by name), send it a signal, or preempt it the way Slurm would, to test
that it checkpoints, requeues and resumes (docs/submit.md)."""

from __future__ import annotations

import click

from .ctx import Ctx, pass_ctx


@click.command()
@click.argument("job_id", metavar="JOBID", required=False)
@click.option("--name", "-n", metavar="NAME", help="Every job of yours with this name (instead of JOBID).")
@click.option("--signal", "sig", metavar="SIG", help="Send SIG to the job's steps instead of ending it.")
@click.option(
    "--preempt",
    is_flag=True,
    help="Deliver what a preemption delivers: the job's --signal (USR2, or --signal) to the batch shell only, "
    "where `slurmkit run` checkpoints and requeues.",
)
@click.option("--dry-run", is_flag=True, help="Print the scancel commands; run nothing.")
@click.option("--json", "as_json", is_flag=True, help='Print {"jobs": [...], "commands": [...]}.')
@pass_ctx
def cancel(ctx: Ctx, job_id, name, sig, preempt, dry_run, as_json):
    """Cancel JOBID (or --name NAME), signal it (--signal), or preempt it (--preempt).

    Exit codes: 0 done, 1 scancel refused, 2 bad usage, 3 Slurm could not be asked."""
    from ..jobs.handle import Job, Slurm, jobs, signal_name
    from ..output import emit_json

    if bool(job_id) == bool(name):
        raise click.UsageError("give a JOBID or --name NAME (one of them)")
    slurm = Slurm.from_settings(ctx.settings, say=ctx.say)
    if job_id:
        targets = [Job(job_id, slurm=slurm)]
    else:
        targets = [j for j in jobs(name=name, slurm=slurm) if not j.status(refresh=False).final]
        if not targets:
            raise click.ClickException(f"no running or pending job of yours is named {name!r}")
    signame = signal_name(sig) if sig else ("USR2" if preempt else None)
    plan = []
    for j in targets:
        if preempt:
            plan.append(["scancel", "--batch", f"--signal={signame}", j.id])
        elif signame:
            plan.append(["scancel", f"--signal={signame}", j.id])
        else:
            plan.append(["scancel", j.id])
    if not dry_run:
        for j in targets:
            if preempt:
                j.preempt(signame or "USR2")
            else:
                j.cancel(signame)
    if as_json:
        emit_json({"jobs": [j.id for j in targets], "commands": plan, "dry_run": dry_run})
        return
    for argv in plan:
        click.echo(("would run: " if dry_run else "") + " ".join(argv))
