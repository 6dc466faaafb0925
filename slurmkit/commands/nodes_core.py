"""What `slurmkit nodes` does, without click (the click command in commands/nodes.py and the lean entry,
slurmkit/entry.py, both run `nodes_main`)."""

from __future__ import annotations

from collections.abc import Callable


def nodes_main(ctx, nodelist: str | None, *, as_json: bool, echo: Callable[..., None]) -> int:
    recs = ctx.backend().nodes(nodelist)
    if as_json:
        from ..output import emit_json

        emit_json({"nodes": [r.to_dict() for r in recs]})
        return 0
    from ..output import table

    rows = []
    for r in recs:
        reason = r.reason
        if reason and (r.reason_user or r.reason_time):
            reason += f" [{r.reason_user or '?'}@{r.reason_time or '?'}]"
        rows.append([r.name, r.state_text.lower(), f"{r.gpus_used}/{r.gpus_total}", reason])
    echo(table(rows, ["NODE", "STATE", "GPUS", "REASON"]))
    return 0
