"""`slurmkit render` and `slurmkit submit`: a job spec in, an sbatch script out (and submitted), through the same
pipeline as the Python API (slurmkit/jobs/pipeline.py). Imports click, PyYAML, Jinja2 and the Slurm CLI backend;
nothing else (no paramiko)."""

from __future__ import annotations

import sys

import click

from .ctx import Ctx, pass_ctx

set_option = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec key (dotted for nested keys: preemption.signal_lead=60); the "
    "value is YAML (a number, a string, a list [1, 2]). KEY+=VALUE adds to a list key "
    "(sbatch+=--exclusive, setup+='module load x', exclude+=n3).",
)


@click.command("render")
@click.argument("spec_path", metavar="JOB.yaml")
@set_option
@pass_ctx
def render_cmd(ctx: Ctx, spec_path, sets):
    """Print the sbatch script for a job spec (nothing is submitted)."""
    from ..jobs.handle import Slurm
    from ..jobs.pipeline import build
    from ..jobs.placing import asker

    # the cluster is asked only for its topology, and only where the site turned submit.placement on
    topology = asker(Slurm.from_settings(ctx.settings, say=ctx.say))
    _, r = build(spec_path, ctx.settings, sets, say=ctx.say, topology=topology)
    sys.stdout.write(r.script)


@click.command()
@click.argument("spec_path", metavar="JOB.yaml")
@set_option
@click.option("--dry-run", is_flag=True, help="Check and print the script; do not submit.")
@click.option("--json", "as_json", is_flag=True, help='Print {"job_id": N, "script": "..."}.')
@click.option("--no-check", is_flag=True, help="Do not ask Slurm whether the partition and GPUs exist first.")
@pass_ctx
def submit(ctx: Ctx, spec_path, sets, dry_run, as_json, no_check):
    """Render a job spec, check it against the cluster, and submit it; print the job id."""
    from ..jobs.handle import Slurm
    from ..jobs.pipeline import background, build
    from ..jobs.placing import asker
    from ..jobs.submitting import sbatch, slurm_said
    from ..output import emit_json

    backend = ctx.backend()
    slurm = Slurm.from_settings(ctx.settings, say=ctx.say)
    check = ctx.settings.submit.check_cluster and not no_check
    # the nodes' listing (one Slurm call) runs while the spec is read and rendered
    nodes = background(backend.nodes_for_check) if check else None
    with slurm_said(slurm):
        _, r = build(spec_path, ctx.settings, sets, nodes=nodes, say=ctx.say, topology=asker(slurm))
    if dry_run:
        if as_json:
            emit_json({"job_id": None, "dry_run": True, "script": r.script})
        else:
            click.echo("dry run: would submit with `sbatch --parsable` (script on stdin):", err=True)
            sys.stdout.write(r.script)
        return
    job_id = sbatch(backend, r.script, slurm)
    if as_json:
        emit_json({"job_id": job_id, "script": r.script})
    else:
        click.echo(job_id)
