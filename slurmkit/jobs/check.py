"""Does the cluster have what a job asks for? A pure function over node records, run before sbatch.

Slurm would accept most impossible requests and leave them pending forever (or reject them with a terse
"Requested node configuration is not available"); saying why, with the spec's line, is kinder.
"""

from __future__ import annotations

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
            import difflib  # only for a hint on an error: off the start-up path

            hint = difflib.get_close_matches(partition, parts, n=1)
            msg = f"{partition!r} does not exist on this cluster"
            msg += f"; did you mean {hint[0]!r}?" if hint else f" (partitions: {', '.join(parts) or 'none'})"
            if spec.partition:
                raise spec.error("partition", msg)
            raise UsageError(f"partition {msg} (the site's submit.default_partition)")
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
            raise spec.error(
                "gpus_per_node",
                f"{gpn} GPUs per node requested, but the nodes of {label} have at "
                f"most {most}; refused before submission",
            )
    fit = [r for r in nodes if r.gpus_total >= gpn]
    if cpus_per_node:
        cpu_fit = [r for r in fit if r.cpus is None or r.cpus >= cpus_per_node]
        if not cpu_fit:
            most = max((r.cpus or 0) for r in fit)
            raise spec.error(
                "cpus_per_gpu",
                f"the job asks {cpus_per_node} CPUs per node, but the nodes of "
                f"{label} with {gpn} GPUs have at most {most}; refused before submission",
            )
        fit = cpu_fit
    if spec.nodes > len(fit):
        what = f" with {gpn} GPUs or more" if gpn else ""
        raise spec.error(
            "nodes", f"{spec.nodes} nodes requested, but {label} has {len(fit)}{what}; refused before submission"
        )
