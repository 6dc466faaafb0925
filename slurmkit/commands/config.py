"""`slurmkit config --node NAME`: one node's effective settings (the site config with its `overrides:` for that
node applied), and where each value came from: the default, a line of the site config, or an override."""

from __future__ import annotations

import click

from .ctx import Ctx, pass_ctx


@click.command("config")
@click.option("--node", "node", required=True, metavar="NAME", help="The node whose settings to show.")
@click.option(
    "--features",
    metavar="LIST",
    help="The node's Slurm features, comma-separated (default: asked from Slurm, when an override selects by feature).",
)
@click.option("--changed", is_flag=True, help="Only the keys that are not the default.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format: docs/config.md, Per-node overrides).")
@pass_ctx
def config_cmd(ctx: Ctx, node, features, changed, as_json):
    """Print NODE's effective settings, each with its source (default, FILE:LINE, or FILE:LINE (overrides[i] ...))."""
    import json

    from ..install.nodeconfig import features_for
    from ..settings import to_dict
    from ..settings.overrides import merge

    settings = ctx.settings
    if features is not None:
        feats: list[str] | None = [f.strip() for f in features.split(",") if f.strip()]
    else:
        feats = features_for(settings, [node])[node]
    merged, sources = merge(settings, node, feats)
    rows = [
        (f"{sec}.{k}", v, sources[f"{sec}.{k}"])
        for sec, vals in to_dict(merged).items()
        for k, v in vals.items()
        if not changed or sources[f"{sec}.{k}"] != "default"
    ]
    if as_json:
        from ..output import emit_json

        emit_json(
            {
                "node": node,
                "features": feats,
                "source": settings.source,
                "settings": {k: {"value": v, "source": src} for k, v, src in rows},
            }
        )
        return 0
    from ..output import table

    click.echo(table([[k, json.dumps(v), src] for k, v, src in rows], ["KEY", "VALUE", "SOURCE"]))
    return 0


__all__ = ["config_cmd"]
