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
    fit = _hosts_fit(spec, label, nodes, fit)
    if spec.gpu_type and gpn:
        fit = _typed_fit(spec, label, gpn, fit)
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
        what = f" with {gpn} {spec.gpu_type + ' ' if spec.gpu_type else ''}GPUs or more" if gpn else ""
        raise spec.error(
            "nodes", f"{spec.nodes} nodes requested, but {label} has {len(fit)}{what}; refused before submission"
        )


def _hosts_fit(spec, label: str, nodes, fit):
    """nodelist/exclude: every host named is a node of the partition (sbatch would refuse it without a line), and
    what is left after the exclusions still holds the job."""
    from .keys import as_list, check_hosts

    names = {r.name for r in nodes}
    for key in ("nodelist", "exclude"):
        hosts = check_hosts(as_list(getattr(spec, key)))
        unknown = [h for h in hosts if h not in names]
        if unknown:
            raise spec.error(
                key,
                f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}: not a usable node of {label} "
                f"(its nodes: {_few(sorted(names))}); refused before submission",
            )
        if key == "nodelist" and hosts:
            small = [r.name for r in fit if r.name in hosts]
            if len(small) < len(hosts):
                short = sorted(set(hosts) - set(small))
                raise spec.error(
                    key,
                    f"{', '.join(short[:5])}: too few GPUs for {spec.gpus_per_node} per node; refused before submission",
                )
        if key == "exclude" and hosts:
            fit = [r for r in fit if r.name not in hosts]
    return fit


def _typed_fit(spec, label: str, gpn: int, fit):
    """gpu_type: nodes whose Gres has that many GPUs of that type (a MIG profile is a type in Gres)."""
    from ..slurm.records import gres_gpu_types

    typed = [r for r in fit if gres_gpu_types(r.gres).get(spec.gpu_type, 0) >= gpn]
    if not typed:
        have: dict[str, int] = {}
        for r in fit:
            for t, n in gres_gpu_types(r.gres).items():
                have[t] = max(have.get(t, 0), n)
        what = ", ".join(f"{t} (up to {n} per node)" for t, n in sorted(have.items())) or (
            "untyped GPUs only (Gres gpu:N, no type)"
        )
        raise spec.error(
            "gpu_type",
            f"no node of {label} has {gpn} GPUs of type {spec.gpu_type!r} in its Gres; the nodes that fit have "
            f"{what}; refused before submission",
        )
    return typed


def _few(names: list[str]) -> str:
    return ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
