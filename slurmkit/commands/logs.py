"""`slurmkit logs JOBID`: a job's output file (its last lines, or followed until the job ends)."""

from __future__ import annotations

import click

from .ctx import Ctx, pass_ctx


@click.command()
@click.argument("job_id", metavar="JOBID")
@click.option("--task", type=click.IntRange(0), metavar="N", help="Array task N of the job (a sweep).")
@click.option("--stderr", "use_stderr", is_flag=True, help="The error file (when the job has a separate one).")
@click.option("-n", "--lines", type=click.IntRange(0, 100000), default=100, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--json", "as_json", is_flag=True, help='Print {"id", "path", "lines": [...]} (not with -f).')
@click.option(
    "--max-wait",
    type=click.FloatRange(1, 7 * 86400),
    default=86400,
    show_default=True,
    metavar="SECONDS",
    help="With -f: stop following after this long even if the job still runs (exit 1).",
)
@pass_ctx
def logs(ctx: Ctx, job_id, task, use_stderr, lines, follow, as_json, max_wait):
    """Print the last lines of a job's output; with -f, follow it until the job ends.

    Exit codes: 0 printed (with -f: the job ended), 1 still running at --max-wait, 2 bad id, 3 Slurm could not
    be asked or no longer knows the job."""
    import sys

    from ..jobs.follow import follow_output
    from ..jobs.handle import Job, Slurm

    if as_json and follow:
        raise click.UsageError("--json prints the last lines once: not with -f")
    if task is not None:
        if "_" in job_id:
            raise click.UsageError("give either JOBID_TASK or --task, not both")
        job_id = f"{job_id}_{task}"
    job = Job(job_id, slurm=Slurm.from_settings(ctx.settings, say=ctx.say))
    path = job.stderr_path if use_stderr else job.stdout_path
    if not path:
        raise click.ClickException(f"job {job.id}: Slurm reports no {'error' if use_stderr else 'output'} file")
    ctx.say(f"job {job.id}: {path}")
    if not follow:
        tail = job.tail(lines, stderr=use_stderr)
        if as_json:
            from ..output import emit_json

            emit_json({"id": job.id, "path": path, "lines": tail})
            return
        for line in tail:
            click.echo(line)
        return
    ended = follow_output(job, path, lines, max_wait, write=sys.stdout.write, flush=sys.stdout.flush)
    if not ended:
        click.echo(f"slurmkit: job {job.id} still {job.state()} after {max_wait:g}s; stopped following", err=True)
        return 1
