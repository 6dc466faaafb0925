"""Slurm access behind one small interface.

    backend = slurm.get_backend(settings)      # CLI tools by default; pyslurm only when it matches the cluster
    job_id = backend.submit(script_text)
    for node in backend.nodes(): ...

The CLI backend (sbatch, scontrol, sinfo, squeue) is the default. Every call has the configured timeout.
Hostlists (`n[001-128]`) go through ClusterShell's NodeSet, the hostlist algebra HPC sites already trust.
"""

from __future__ import annotations

from typing import Protocol

from .records import JobRecord, NodeRecord


class SlurmBackend(Protocol):
    name: str

    def version(self) -> str: ...

    def submit(self, script: str, args: list[str] | tuple[str, ...] = ()) -> int: ...

    def nodes(self, names: str | None = None) -> list[NodeRecord]: ...

    def nodes_for_check(self) -> list[NodeRecord]: ...

    def job(self, job_id: int) -> JobRecord: ...

    def drain(self, nodes: str, reason: str) -> None: ...

    def resume(self, nodes: str) -> None: ...

    def requeue(self, job_id: int, hold: bool = False, start_now: bool = False) -> None: ...

    def start_in(self, job_id: int, seconds: int) -> None: ...

    def cancel(self, job_id: int) -> None: ...

    def signal_steps(self, job_id: int, sig: str) -> None: ...


def expand_hostlist(expr: str) -> list[str]:
    """'n[001-003],gpu7' -> ['n001', 'n002', 'n003', 'gpu7'] (ClusterShell NodeSet), bounded: an expression over
    slurmkit.hostlist.DEFAULT_LIMIT names is refused before any name is made (`n[1-99999999]` from a capture or
    a command line would otherwise take gigabytes)."""
    from ..hostlist import expand

    return expand(expr)


def fold_hostlist(names) -> str:
    """['n1', 'n2', 'n3', 'n7'] -> 'n[1-3,7]'."""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(names)))


def get_backend(settings, *, verbose=None) -> SlurmBackend:
    """The backend the config asks for: `auto` uses pyslurm only when it imports and matches Slurm's version."""
    from .cli_backend import CliBackend

    cli = CliBackend(timeout=settings.slurm.timeout, bin_dir=settings.slurm.bin_dir, say=verbose)
    choice = settings.slurm.backend
    if choice == "cli":
        if verbose:
            verbose("using the Slurm CLI backend: slurm.backend is 'cli'")
        return cli
    from . import pyslurm_backend

    ok, why = pyslurm_backend.usable(cli)
    if ok:
        if verbose:
            verbose(f"using the pyslurm backend: {why}")
        return pyslurm_backend.PyslurmBackend(cli)
    if choice == "pyslurm":
        from ..errors import SlurmkitError

        raise SlurmkitError(f"slurm.backend is 'pyslurm' but {why}")
    if verbose:
        verbose(f"using the Slurm CLI backend: {why}")
    return cli


__all__ = ["SlurmBackend", "NodeRecord", "JobRecord", "get_backend", "expand_hostlist", "fold_hostlist"]
