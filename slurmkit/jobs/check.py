"""Does the cluster have what a job asks for? A pure function over node records, run before sbatch.

Slurm would accept most impossible requests and leave them pending forever (or reject them with a terse
"Requested node configuration is not available"); saying why, with the spec's line, is kinder.
"""
from __future__ import annotations

import difflib

from ..errors import UsageError

# nodes in these states cannot run anything soon; drained nodes may come back, so they still count for "exists"
_GONE_FLAGS = {"FAIL"}


def check_request(spec, partition: str | None, cpus_per_node: int | None, records) -> None:
    """Raise UsageError (exit 2) when no node of the partition can hold one node's share of the job."""
    path = spec.source
    if partition:
        parts = sorted({p for r in records for p in r.partitions})
        nodes = [r for r in records if partition in r.partitions]
        if not nodes:
            hint = difflib.get_close_matches(partition, parts, n=1)
            msg = f"partition {partition!r} does not exist on this cluster"
            msg += f"; did you mean {hint[0]!r}?" if hint else f" (partitions: {', '.join(parts) or 'none'})"
            key = "partition" if spec.partition else None
            raise UsageError(msg, path=path if key else None, line=spec.lines.get("partition") if key else None)
    else:
        nodes = list(records)
    nodes = [r for r in nodes if not (_GONE_FLAGS & set(r.flags))]
    label = f"partition {partition}" if partition else "the cluster"
    if not nodes:
        raise UsageError(f"{label} has no usable nodes", path=path)
    gpn = spec.gpus_per_node
    if gpn:
        most = max(r.gpus_total for r in nodes)
        if gpn > most:
            raise UsageError(f"gpus_per_node: {gpn} GPUs per node requested, but the nodes of {label} have at most "
                             f"{most}; refused before submission", path=path, line=spec.lines.get("gpus_per_node"))
    fit = [r for r in nodes if r.gpus_total >= gpn]
    if cpus_per_node:
        cpu_fit = [r for r in fit if r.cpus is None or r.cpus >= cpus_per_node]
        if not cpu_fit:
            most = max((r.cpus or 0) for r in fit)
            raise UsageError(f"cpus_per_gpu: the job asks {cpus_per_node} CPUs per node, but the nodes of {label} "
                             f"with {gpn} GPUs have at most {most}; refused before submission", path=path,
                             line=spec.lines.get("cpus_per_gpu") or spec.lines.get("gpus_per_node"))
        fit = cpu_fit
    if spec.nodes > len(fit):
        what = f" with {gpn} GPUs or more" if gpn else ""
        raise UsageError(f"nodes: {spec.nodes} nodes requested, but {label} has {len(fit)}{what}; refused before "
                         "submission", path=path, line=spec.lines.get("nodes"))
