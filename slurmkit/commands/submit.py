"""`slurmkit render` and `slurmkit submit`: a job spec in, an sbatch script out (and submitted). The options are
here; what the commands do is in submit_core (click-free: slurmkit/entry.py runs it without click too).

Kept light: `submit` imports click, PyYAML, Jinja2 and the Slurm CLI backend; nothing else (no paramiko).
"""

from __future__ import annotations

import click

from .ctx import Ctx, echo, pass_ctx

set_option = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec key (dotted for nested keys: preemption.signal_lead=60); the "
    "value is YAML (a number, a string, a list [1, 2]).",
)


@click.command("render")
@click.argument("spec_path", metavar="JOB.yaml")
@set_option
@pass_ctx
def render_cmd(ctx: Ctx, spec_path, sets):
    """Print the sbatch script for a job spec (nothing is submitted)."""
    from .submit_core import render_main

    render_main(ctx, spec_path, sets)


@click.command()
@click.argument("spec_path", metavar="JOB.yaml")
@set_option
@click.option("--dry-run", is_flag=True, help="Check and print the script; do not submit.")
@click.option("--json", "as_json", is_flag=True, help='Print {"job_id": N, "script": "..."}.')
@click.option("--no-check", is_flag=True, help="Do not ask Slurm whether the partition and GPUs exist first.")
@pass_ctx
def submit(ctx: Ctx, spec_path, sets, dry_run, as_json, no_check):
    """Render a job spec, check it against the cluster, and submit it; print the job id."""
    from .submit_core import submit_main

    submit_main(
        ctx,
        spec_path,
        sets,
        dry_run=dry_run,
        as_json=as_json,
        no_check=no_check,
        echo=echo,
    )
