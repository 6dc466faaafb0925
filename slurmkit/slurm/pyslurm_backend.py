"""pyslurm backend: used only when pyslurm imports and was built for the running Slurm's major.minor version.

PyPI ships pyslurm 25.11 (and 17/18) only; it refuses Slurm 22.05 with "Slurm version mismatch", so on the
Debian 12 packages the CLI backend is what runs. Where pyslurm matches, node listing goes through its API (no
fork/exec per call); every other operation goes through the CLI backend, which is the tested path.
"""
from __future__ import annotations

import importlib.util
import re

from .records import NodeRecord, gres_gpu_count, parse_reason, parse_state


def _major_minor(v: str) -> str | None:
    m = re.search(r"(\d+)\.(\d+)", v or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def usable(cli) -> tuple[bool, str]:
    """(True, "") when pyslurm can be used against this cluster, else (False, why)."""
    if importlib.util.find_spec("pyslurm") is None:
        return False, "pyslurm is not installed"
    try:
        import pyslurm  # noqa: F401
    except Exception as e:  # pyslurm raises on import when built for another libslurm
        return False, f"pyslurm does not import ({e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    have = _major_minor(getattr(pyslurm, "__version__", "") or "")
    try:
        want = _major_minor(cli.version())
    except Exception as e:
        return False, f"cannot read the Slurm version ({e})"
    if not have or have != want:
        return False, f"pyslurm {have or '?'} does not match Slurm {want or '?'}"
    return True, ""


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, cli):
        self._cli = cli

    def __getattr__(self, attr):
        # submit, job, drain, resume, requeue, cancel, version: the CLI backend
        return getattr(self._cli, attr)

    def nodes(self, names: str | None = None) -> list[NodeRecord]:
        import pyslurm
        out = []
        for name, n in pyslurm.Nodes.load().items():
            state, flags = parse_state("+".join([str(n.state), *[str(f) for f in (n.state_flags or [])]])
                                       if hasattr(n, "state_flags") else str(n.state))
            reason, user, when = parse_reason(n.reason or "")
            gres = ",".join(f"{k}:{v}" for k, v in (n.configured_gres or {}).items())
            used = ",".join(f"{k}:{v}" for k, v in (n.allocated_gres or {}).items())
            out.append(NodeRecord(name=name, state=state, flags=flags, reason=reason,
                                  reason_user=getattr(n, "reason_user", None) or user,
                                  reason_time=when, gres=gres, gres_used=used, gpus_total=gres_gpu_count(gres),
                                  gpus_used=gres_gpu_count(used), partitions=list(n.partitions or []),
                                  cpus=n.total_cpus, cpus_alloc=n.allocated_cpus))
        if names:
            from . import expand_hostlist
            wanted = set(expand_hostlist(names))
            out = [r for r in out if r.name in wanted]
        return out
