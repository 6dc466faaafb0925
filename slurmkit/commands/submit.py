"""`slurmkit render` and `slurmkit submit`: a job spec in, an sbatch script out (and submitted).

Kept light: `submit` imports click, PyYAML, Jinja2 and the Slurm CLI backend; nothing else (no paramiko).
"""
from __future__ import annotations

import os
import sys

import click

from .ctx import Ctx, pass_ctx

set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override a spec key (dotted for nested keys: preemption.signal_lead=60); the "
                               "value is YAML (a number, a string, a list [1, 2]).")


def _render(ctx: Ctx, spec_path: str, sets):
    from ..jobs import render, spec as specmod
    spec = specmod.load(spec_path, sets)
    stem = os.path.basename(spec_path)
    r = render.render(spec, ctx.settings, spec_name=stem)
    ctx.say(f"template {r.template}")
    for n in r.notes:
        ctx.say(n)
    return spec, r


@click.command("render")
@click.argument("spec_path", metavar="JOB.yaml")
@set_option
@pass_ctx
def render_cmd(ctx: Ctx, spec_path, sets):
    """Print the sbatch script for a job spec (nothing is submitted)."""
    _, r = _render(ctx, spec_path, sets)
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
    check = ctx.settings.submit.check_cluster and not no_check
    backend = ctx.backend()
    nodes = _background(backend.nodes) if check else None   # sinfo runs while the spec is read and rendered
    spec, r = _render(ctx, spec_path, sets)
    if nodes is not None:
        from ..jobs.check import check_request
        check_request(spec, r.partition, r.cpus_per_node, nodes())
        ctx.say(f"the cluster has room for the request ({spec.nodes} node(s) x {spec.gpus_per_node} GPU(s))")
    if dry_run:
        if as_json:
            from ..output import emit_json
            emit_json({"job_id": None, "dry_run": True, "script": r.script})
        else:
            click.echo("dry run: would submit with `sbatch --parsable` (script on stdin):", err=True)
            sys.stdout.write(r.script)
        return
    job_id = backend.submit(r.script)
    if as_json:
        from ..output import emit_json
        emit_json({"job_id": job_id, "script": r.script})
    else:
        click.echo(job_id)


def _background(fn):
    """Run fn in a thread (it waits on a subprocess, so it overlaps with our own work); the returned function
    joins and returns its result or raises its exception."""
    import threading
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def result():
        t.join()
        if "error" in box:
            raise box["error"]
        return box["value"]
    return result
