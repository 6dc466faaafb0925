"""Whether a job asks Slurm to keep its nodes together (issue 33): `--switches=1@WAIT` under one leaf switch on
topology/tree, `--segment=N` inside one NVLink block on topology/block. The site turns it on (submit.placement,
off by default), a spec opts out (`placement: false`), and the decision itself is slurmkit/fabric/placement.py's,
over this Slurm's own `scontrol show topology`, asked once and only when a multi-node job could use it.

    opts, why = place(spec, settings, show_topology)    # (["--switches=1@5"], "2 nodes fit under one leaf ...")
"""

from __future__ import annotations

from collections.abc import Callable

from .spec import JobSpec

OWN = ("--switches", "--segment")  # a spec's raw sbatch items that say where its nodes go: the spec's own wins


def place(spec: JobSpec, settings, show_topology: Callable[[], str] | None) -> tuple[list[str], str]:
    """(sbatch options, the reason they were or were not added). `show_topology`: a function returning the text
    of `scontrol show topology` (None: the cluster is not asked; only where the site has placement off)."""
    sub = settings.submit
    if not sub.placement:
        return [], "topology placement is off in the site config (submit.placement)"
    if not spec.placement:
        return [], "the spec opts out of topology placement (placement: false)"
    if spec.nodes < 2:
        return [], "a one-node job needs no placement"
    for raw in spec.sbatch:
        if raw.partition("=")[0] in OWN:
            return [], f"the spec asks for {raw} itself (sbatch:): no placement added"
    if spec.nodelist:
        return [], "the spec names its nodes (nodelist): no placement added"
    if show_topology is None:
        return [], "the cluster's topology was not asked: no placement added"
    # imported only here, where a placement is decided: with placement off (the default) a submit never pays for
    # the fabric parsers (fabric.placement imports fabric.ibnet, 4-6 ms of regexes and classes)
    from ..fabric import placement

    topo = placement.parse_show_topology(show_topology())
    return placement.decide(spec.nodes, topo, enabled=True, wait=placement.wait_text(sub.switch_wait))


def asker(slurm) -> Callable[[], str]:
    """`scontrol show topology` through the job queries' runner (the site's Slurm timeout and bin_dir): its text.
    Without a topology plugin Slurm prints nothing (measured: 22.05 exits 0 with `scontrol: error: No topology
    information available` on stderr, 24.11's topology/flat exits 0 silently): an empty topology, which decide()
    says is one. A Slurm that does not answer is exit 3: the site asked for placement and it could not be decided."""

    def ask() -> str:
        from .handle import SlurmUnavailable
        from ..errors import SlurmkitError

        try:
            res = slurm.run(["scontrol", "show", "topology"])
        except SlurmkitError as e:
            raise SlurmUnavailable(
                f"could not ask Slurm for its topology (the site's submit.placement is on; a spec can set "
                f"placement: false): {e}"
            ) from None
        return res.stdout if res is not None else ""

    return ask
