"""The drain etiquette (../shared/DESIGN.md), in one place.

- Reasons start with `settings.drain.prefix` and the check: `slurmkit:xid79 GPU 0000:3b:00 fell off the bus`,
  so the first 20 characters (all `sinfo -R` shows) say what happened.
- Never overwrite a reason slurmkit did not write; skip nodes that are down, drained by someone else, or in
  maintenance / reboot states.
- Only ever resume nodes slurmkit drained.

Every function returns what it did, as a short action string the health log records:
`drained`, `already-drained` (ours already: the first reason stays), `would-drain`,
`skipped-admin-drain`, `skipped-down`, `skipped-maintenance`, `skipped-unknown-node`, `drain-failed: ...`,
`resumed`, `would-resume`, `skipped-not-ours`, `skipped-not-drained`, `resume-failed: ...`.
"""
from __future__ import annotations

from .errors import SlurmkitError

MAX_REASON = 200
# states where slurmkit keeps its hands off the node
_HANDS_OFF_FLAGS = {"MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN",
                    "POWERING_UP", "RESERVED_MAINT"}


def is_slurmkit_reason(reason: str | None, settings) -> bool:
    """True when slurmkit wrote this drain reason (it starts with the configured prefix)."""
    return bool(reason) and reason.strip().startswith(settings.drain.prefix)


def check_of_reason(reason: str | None, settings) -> str | None:
    """The check that wrote a slurmkit reason: 'slurmkit:xid79 GPU ...' -> 'xid', 'slurmkit:ecc ...' -> 'ecc'.
    None for a reason slurmkit did not write. Resume a node only after this check passes again."""
    if not is_slurmkit_reason(reason, settings):
        return None
    word = reason.strip()[len(settings.drain.prefix):].split(" ", 1)[0]
    for name in ("gpu_count", "gpu_procs", "driver", "nvlink", "nccl", "pcie", "ecc", "recovery", "dcgm", "sxid", "xid"):
        if word.startswith(name):
            return "xid" if name == "sxid" else name
    return word or None


def reason_for(settings, check: str, detail: str) -> str:
    """`<prefix><check> <detail>` on one line, cut to what Slurm keeps comfortably."""
    detail = " ".join(str(detail).split())
    text = f"{settings.drain.prefix}{check} {detail}".strip()
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def reason_for_result(settings, result) -> str:
    return reason_for(settings, result.code or result.check, result.reason)


def _record(backend, node: str):
    recs = backend.nodes(node)
    for r in recs:
        if r.name == node:
            return r
    return None


def drain_node(settings, node: str, reason: str, *, backend=None, dry_run: bool = False) -> str:
    """Drain `node` with `reason` (which must carry slurmkit's prefix), following the etiquette."""
    if not is_slurmkit_reason(reason, settings):
        raise ValueError(f"drain reason must start with {settings.drain.prefix!r}: {reason!r}")
    if backend is None:
        from .slurm import get_backend
        backend = get_backend(settings)
    try:
        rec = _record(backend, node)
    except SlurmkitError as e:
        return f"drain-failed: {e}"
    if rec is None:
        return "skipped-unknown-node"
    if rec.state == "DOWN" or "NOT_RESPONDING" in rec.flags:
        return "skipped-down"
    if _HANDS_OFF_FLAGS & set(rec.flags):
        return "skipped-maintenance"
    if rec.drained or "FAIL" in rec.flags:
        if not is_slurmkit_reason(rec.reason, settings):
            return "skipped-admin-drain"
        # ours already: keep the first reason, usually the root cause (a hung nvidia-smi in the prolog, then the
        # epilog's ECC read timing out on the same hang, must not bury the first finding)
        return "already-drained"
    action = "drained"
    if dry_run:
        return "would-drain"
    try:
        backend.drain(node, reason)
    except SlurmkitError as e:
        return f"drain-failed: {e}"
    return action


def resume_node(settings, node: str, *, backend=None, dry_run: bool = False) -> str:
    """Resume `node` only when slurmkit drained it (its reason carries the prefix)."""
    if backend is None:
        from .slurm import get_backend
        backend = get_backend(settings)
    try:
        rec = _record(backend, node)
    except SlurmkitError as e:
        return f"resume-failed: {e}"
    if rec is None:
        return "skipped-unknown-node"
    if not (rec.drained or "FAIL" in rec.flags):
        return "skipped-not-drained"
    if not is_slurmkit_reason(rec.reason, settings):
        return "skipped-not-ours"
    if dry_run:
        return "would-resume"
    try:
        backend.resume(node)
    except SlurmkitError as e:
        return f"resume-failed: {e}"
    return "resumed"
