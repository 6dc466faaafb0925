"""The drain etiquette (../shared/DESIGN.md), in one place.

- Reasons start with `settings.drain.prefix` and the check: `slurmkit:xid79 GPU 0000:3b:00 fell off the bus`,
  so the first 20 characters (all `sinfo -R` shows) say what happened.
- Never overwrite a reason slurmkit did not write; skip nodes that are down, drained by someone else, or in
  maintenance / reboot states.
- Only ever resume nodes slurmkit drained.

Every function returns what it did, as a short action string the health log records:
`drained`, `redrained` (our own reason replaced by a newer one of ours), `already-drained`, `would-drain`,
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
        if rec.reason.strip() == reason.strip():
            return "already-drained"
        action = "redrained"
    else:
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
