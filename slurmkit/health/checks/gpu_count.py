"""gpu_count: GPUs visible vs expected for the node (config per node, else `gpu_count.expected`, else the gres
count the caller knows). Input: `nvidia-smi -q` (or `-L`) text; nvidia-smi's own error lines are findings."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, live_unreadable, to_int
from ..context import NoData

NAME = "gpu_count"


def expected_for(settings, node: str) -> int | None:
    per = settings.gpu_count.per_node
    if per:
        from ...hostlist import contains  # ClusterShell only when a site uses per-node counts

        for expr, n in per.items():
            if contains(expr, node):  # bounded: a pattern, never expanded past the limit
                return n
    return settings.gpu_count.expected


def evaluate(text: str, expected: int | None) -> Result:
    errs = nvsmi.errors(text)
    listed = nvsmi.parse_list(text)
    if listed:
        seen, attached, ids = len(listed), None, [g["uuid"] or g["index"] for g in listed]
    else:
        q = nvsmi.parse_q(text)
        ids = [g["bus_id"] for g in q["gpus"] if g["bus_id"]]
        seen, attached = len(ids), to_int(q["attached"])
        if not ids and attached is None and not errs:
            raise NoData("no GPU list in this input (expected `nvidia-smi -q` or `-L` output)")
    ev = {"visible": seen, "attached": attached, "expected": expected, "gpus": ids}
    blind = [] if listed else [g["bus_id"] for g in q["gpus"] if g["bus_id"] and not g["tree"].readable()]
    if errs:
        ev["errors"] = errs
        return Result(NAME, "fail", f"nvidia-smi: {errs[-1]}", ev, code="gpu_count")
    lost = [] if listed else [g["bus_id"] for g in q["gpus"] if g["bus_id"] and g["tree"].lost()]
    if lost:
        # listed, so counted, but gone: a GPU that fell off the bus is not a visible GPU
        ev["lost"] = lost
        return Result(
            NAME,
            "fail",
            f"GPU {', '.join(lost[:8])} is lost (nvidia-smi reads 'GPU is lost'); {seen - len(lost)} of "
            f"{expected if expected is not None else seen} GPUs working",
            ev,
            code="gpu_count",
        )
    if expected is not None and seen != expected:
        return Result(NAME, "fail", f"{seen} of {expected} GPUs visible", ev, code="gpu_count")
    why = f"{seen} GPUs visible" + ("" if expected is not None else " (no expected count configured)")
    if blind:
        # a GPU whose every field reads N/A is listed, not working: say so, never a plain ok
        ev["unreadable"] = blind
        return Result(NAME, "warn", f"{why}; nvidia-smi reads nothing but N/A for {', '.join(blind[:8])}", ev)
    return Result(NAME, "ok", why, ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    if bad is not None:
        return bad
    return evaluate(text, ctx.expected_gpus if ctx.expected_gpus is not None else expected_for(ctx.settings, ctx.node))
