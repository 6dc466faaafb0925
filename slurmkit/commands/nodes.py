from __future__ import annotations

import click

from .ctx import Ctx, echo, pass_ctx


@click.command()
@click.argument("nodelist", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (see README for the format).")
@pass_ctx
def nodes(ctx: Ctx, nodelist, as_json):
    """Nodes with their state, GPUs (used/total) and reason (who set it, when). NODELIST is a hostlist."""
    from .nodes_core import nodes_main

    nodes_main(ctx, nodelist, as_json=as_json, echo=echo)
