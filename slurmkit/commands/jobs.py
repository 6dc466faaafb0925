"""`slurmkit jobs`: your jobs (or a user's, or everyone's) with state, nodes, GPUs, elapsed time, restarts and the
last event `slurmkit run` wrote (docs/submit.md)."""

from __future__ import annotations

import click

from .ctx import Ctx, pass_ctx


@click.command()
@click.option("--all", "all_users", is_flag=True, help="Every user's jobs.")
@click.option("--user", "-u", metavar="USER", help="This user's jobs (default: yours).")
@click.option("--name", "-n", metavar="NAME", help="Only jobs of this name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format: docs/submit.md).")
@pass_ctx
def jobs(ctx: Ctx, all_users, user, name, as_json):
    """Jobs slurmctld knows (running, pending, recently ended) and what `slurmkit run` last did in each.

    Exit codes: 0 listed (also none), 3 Slurm could not be asked."""
    from ..jobs.handle import Slurm, jobs as list_jobs
    from ..jobs.listing import job_row
    from ..output import emit_json, table

    if all_users and user:
        raise click.UsageError("--all and --user exclude each other")
    slurm = Slurm.from_settings(ctx.settings, say=ctx.say)
    rows = [job_row(j) for j in list_jobs(user=user, name=name, all_users=all_users, slurm=slurm)]
    if as_json:
        emit_json({"jobs": rows})
        return
    if not rows:
        click.echo("no jobs", err=True)
        return
    cells = [
        [
            r["id"],
            r["name"],
            r["user"],
            r["state"] + (f" ({r['reason']})" if r["reason"] and r["state"] == "PENDING" else ""),
            r["nodes"] or "-",
            str(r["gpus"]),
            r["elapsed"],
            str(r["restarts"]),
            r["event"] or "",
        ]
        for r in rows
    ]
    click.echo(table(cells, ["JOBID", "NAME", "USER", "STATE", "NODES", "GPUS", "ELAPSED", "RESTARTS", "LAST EVENT"]))
