"""pyslurm backend: used only when pyslurm imports and was built for the running Slurm's major.minor version.

PyPI ships pyslurm 25.11 (and 17/18) only; it refuses Slurm 22.05 with "Slurm version mismatch", so on the
Debian packages the CLI backend is what runs. Where pyslurm matches, node listing goes through its API (no
fork/exec per call); every other operation goes through the CLI backend, which is the tested path.

What pyslurm 25.11 gives (checked against a source build of Slurm 25.11.7): `Node.state` the complete state text
('IDLE+DRAIN'), `Node.reason` without a `[user@time]` suffix, `Node.reason_time` an epoch integer,
`Node.reason_user` a name even when there is no reason (the uid is 0 then), `Node.allocated_gres` taken from
`allocated_tres`, which has no `gres/gpu` without slurmdbd. The node's GresUsed is not exposed, so GPUs in use
come from the running jobs' per-node layout (`Job.get_resource_layout_per_node()`, Slurm's gres_detail_str: what
`scontrol -d show node` sums into GresUsed).
"""

from __future__ import annotations

import importlib.util
import re

from ..times import slurm_local
from .records import NodeRecord, clean_reason, gres_gpu_count, parse_state


def _major_minor(v: str) -> str | None:
    """'22.05.8' -> '22.05', '25.11.2' -> '25.11': as Slurm writes its releases (two-digit month), compared as such."""
    m = re.search(r"(\d+)\.(\d+)", v or "")
    return f"{int(m.group(1))}.{int(m.group(2)):02d}" if m else None


def usable(cli) -> tuple[bool, str]:
    """(True, why) when pyslurm can be used against this cluster, else (False, why)."""
    if importlib.util.find_spec("pyslurm") is None:
        return False, "pyslurm is not installed"
    try:
        import pyslurm
    except Exception as e:  # noqa: BLE001 - pyslurm raises on import when built for another libslurm
        return False, f"pyslurm does not import ({e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    have = _major_minor(getattr(pyslurm, "__version__", "") or "")
    try:
        want = _major_minor(cli.version())
    except Exception as e:  # noqa: BLE001 - said in the reason pyslurm is not used
        return False, f"cannot read the Slurm version ({e})"
    if not have or have != want:
        return False, f"pyslurm {have or '?'} does not match Slurm {want or '?'}"
    return True, f"pyslurm {pyslurm.__version__} matches Slurm {cli.version()}"


# --- pure conversions over pyslurm's objects (tests feed recorded ones) ----------------------------------------


def _epoch_iso(v) -> str | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        return None
    try:
        return slurm_local(int(v))
    except (OverflowError, OSError, ValueError):
        return None


def _gres_text(d) -> str:
    """{'gpu:tesla': 2, 'nic': 1} -> 'gpu:tesla:2,nic:1' (pyslurm's parsed gres dicts back into Slurm's form)."""
    if not isinstance(d, dict):
        return ""
    return ",".join(f"{k}:{v}" for k, v in d.items() if isinstance(k, str) and isinstance(v, int) and v >= 0)


def gres_used_by_node(layouts) -> dict[str, dict[str, int]]:
    """Running jobs' `get_resource_layout_per_node()` results -> {node: {'gpu': 2}} summed over jobs. pyslurm 25.11
    gives each gres as {'count': 2, 'indexes': '0-1'} (a bare count is read too)."""
    out: dict[str, dict[str, int]] = {}
    for layout in layouts:
        for node, res in (layout if isinstance(layout, dict) else {}).items():
            gres = res.get("gres") if isinstance(res, dict) else None
            for k, v in (gres if isinstance(gres, dict) else {}).items():
                count = v.get("count") if isinstance(v, dict) else v
                if isinstance(k, str) and isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                    out.setdefault(node, {})
                    out[node][k] = out[node].get(k, 0) + count
    return out


def node_record(name: str, n, used: dict[str, int] | None = None) -> NodeRecord:
    """One pyslurm Node (or a recorded object with its attributes) -> NodeRecord."""
    state, flags = parse_state(str(getattr(n, "state", "") or "UNKNOWN"))
    # pyslurm gives the reason as Slurm keeps it, without the `[user@time]` that scontrol/sinfo add: the text is
    # whole (an admin's reason may itself end in `[bob@2026-01-01T00:00:00]`), user and time come from its fields
    raw = getattr(n, "reason", None)
    reason = clean_reason(raw if isinstance(raw, str) else None)
    user = when = None
    if reason:
        u = getattr(n, "reason_user", None)
        user = u if isinstance(u, str) and u else None
        when = _epoch_iso(_raw_time(n, "reason_time"))
    configured = getattr(n, "configured_gres", None)
    gres = _gres_text(configured)
    # as scontrol prints GresUsed: every configured gres, 0 where no running job holds it
    used_text = _gres_text({**{k: 0 for k in (configured if isinstance(configured, dict) else {})}, **(used or {})})
    return NodeRecord(
        name=name,
        state=state,
        flags=flags,
        reason=reason,
        reason_user=user,
        reason_time=when,
        gres=gres,
        gres_used=used_text,
        gpus_total=gres_gpu_count(gres),
        gpus_used=gres_gpu_count(used_text),
        partitions=list(getattr(n, "partitions", None) or []),
        cpus=getattr(n, "total_cpus", None),
        cpus_alloc=getattr(n, "allocated_cpus", None),
        boot_time=_epoch_iso(_raw_time(n, "boot_time")),
        last_busy=_epoch_iso(_raw_time(n, "last_busy_time")),
    )


def _raw_time(n, attr: str):
    """An epoch time attribute: pyslurm 25.11 gives `reason_time` as an int; releases that format it give the int as
    `<attr>_raw`."""
    raw = getattr(n, attr + "_raw", None)
    return raw if isinstance(raw, int) else getattr(n, attr, None)


class PyslurmBackend:
    name = "pyslurm"

    def __init__(self, cli):
        self._cli = cli

    def __getattr__(self, attr):
        # submit, job, drain, resume, requeue, cancel, version: the CLI backend
        return getattr(self._cli, attr)

    def _load(self):
        import pyslurm

        from .cli_backend import SlurmNoAnswer

        try:
            nodes = pyslurm.Nodes.load()
            jobs = pyslurm.Jobs.load()
            layouts = [j.get_resource_layout_per_node() for j in jobs.values() if str(j.state) == "RUNNING"]
        except Exception as e:  # noqa: BLE001 - pyslurm.core.error.RPCError and friends: a clear error, not a traceback
            msg = str(e).strip() or e.__class__.__name__
            raise SlurmNoAnswer(
                f"pyslurm could not load nodes/jobs from slurmctld: {msg} (is slurmctld up? "
                "check SLURM_CONF and `scontrol ping`)"
            ) from None
        return nodes, layouts

    def nodes(self, names: str | None = None) -> list[NodeRecord]:
        from .cli_backend import SlurmNoAnswer

        nodes, layouts = self._load()
        used = gres_used_by_node(layouts)
        out = [node_record(name, n, used.get(name)) for name, n in nodes.items()]
        if not out:
            raise SlurmNoAnswer(f"pyslurm (Slurm {self._cli.version()}): slurmctld answered with no nodes")
        if names:
            from . import expand_hostlist

            wanted = set(expand_hostlist(names))
            out = [r for r in out if r.name in wanted]
        return out

    def nodes_for_check(self) -> list[NodeRecord]:
        """The submit's cluster check: the same records as nodes(), from pyslurm's API (no Slurm command)."""
        return self.nodes()
