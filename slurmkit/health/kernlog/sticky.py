"""Fatal kernel-log faults stay active for the rest of their boot (pure functions over the xid check's state).

A fatal event is reported once as new (the mark moves past it when a hook acted on it), but the GPU it names stays
broken until the node reboots: a drain that Slurm loses (slurmctld killed before it saved state, an admin's
`scontrol update state=resume`) must not leave the node in service. So each fatal verdict is kept in the node's
state with the boot it happened in, and every later live run on that boot fails again with it, whatever became of
the drain. It ends when the boot id changes, when the site's policy no longer counts it (xid.ignore,
xid.ignore_signatures), or when an admin's explicit recheck (`slurmkit check --only xid`, what `slurmkit audit resume
--recheck` runs) finds no fatal event in the whole kernel log of this boot (the xid check decides that)."""

from __future__ import annotations

MAX_FAULTS = 16  # one per (tag, GPU): a flood of one Xid is one fault
MAX_LINE = 1000  # characters of the failing line kept as evidence
_KEYS = ("tag", "kind", "code", "sig", "gpu", "reason", "line")


def fault(v, reason: str) -> dict:
    """The state record of one fatal verdict: what drains (tag, reason) and what an admin reads (the line)."""
    return {
        "tag": v.tag,
        "kind": v.kind,
        "code": v.code,
        "sig": v.event.sig,
        "gpu": v.pci,
        "reason": reason,
        "line": v.event.line[:MAX_LINE],
    }


def _valid(f) -> bool:
    return (
        isinstance(f, dict)
        and isinstance(f.get("tag"), str)
        and f["tag"].startswith("xid")
        and isinstance(f.get("reason"), str)
        and isinstance(f.get("line"), str)
    )


def same_boot(state: dict, boot_id: str | None) -> bool:
    """Whether `state` was written in this boot. A boot id that cannot be read (now or then) cannot prove a reboot:
    the faults stay."""
    then = state.get("boot_id")
    return not (then and boot_id and then != boot_id)


def active(state: dict, boot_id: str | None, *, ignore=(), ignore_signatures=()) -> list[dict]:
    """The faults of `state` still active now: same boot, and still counted by the site's policy."""
    if not isinstance(state, dict) or not same_boot(state, boot_id):
        return []
    faults = state.get("faults")
    if not isinstance(faults, list):
        return []
    out = []
    for f in faults[:MAX_FAULTS]:
        if not _valid(f):
            continue
        if f.get("kind") == "xid" and f.get("code") in set(ignore or ()):
            continue
        if f.get("kind") == "sig" and f.get("sig") in set(ignore_signatures or ()):
            continue
        out.append({k: f.get(k) for k in _KEYS})
    return out


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """Old faults first (the first reason stays), then new ones on another (tag, GPU); at most MAX_FAULTS."""
    out: list[dict] = []
    seen: set[tuple] = set()
    for f in list(old) + list(new):
        key = (f["tag"], f.get("gpu"))
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out[:MAX_FAULTS]
