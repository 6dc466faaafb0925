"""`slurmkit nodes`: every node's state, GPUs and reason, from the Slurm backend."""

from __future__ import annotations

import click

from .ctx import Ctx, pass_ctx


@click.command()
@click.argument("nodelist", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format: docs/nodes.md).")
@pass_ctx
def nodes(ctx: Ctx, nodelist, as_json):
    """Nodes with their state, GPUs (used/total) and reason (who set it, when). NODELIST is a hostlist. Exit 0 when Slurm answered, 2 on
    bad input, 3 when Slurm could not be asked (no answer, or one slurmkit cannot read)."""
    from ..output import emit_json, table

    recs = ctx.backend().nodes(nodelist)
    if as_json:
        emit_json({"nodes": [r.to_dict() for r in recs]})
        return
    rows = []
    for r in recs:
        reason = r.reason
        if reason and (r.reason_user or r.reason_time):
            reason += f" [{r.reason_user or '?'}@{r.reason_time or '?'}]"
        rows.append([r.name, r.state_text.lower(), f"{r.gpus_used}/{r.gpus_total}", reason])
    click.echo(table(rows, ["NODE", "STATE", "GPUS", "REASON"]))
