"""The node's kernel-log check, as pure functions: which lines matter and their prefixes (`logline`), events
from them (`events`: Xid / SXid lines, signatures of GPU failures logged without an Xid, unreadable Xid lines),
the signature data (`signatures`), the grading policy (`policy`) and the fatal faults kept for the rest of their
boot (`sticky`). `parse`, `grade`, `grade_all`, `catalog`,
`new_events` and `next_state` keep the names and signatures the xid check has always used."""

from __future__ import annotations

from .events import Event, parse

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .policy import Verdict, catalog, grade, grade_all


def __getattr__(name: str):
    """The grading policy (and its catalog) loads when an event is first graded: a node whose kernel log has
    no GPU event, the usual prolog, never needs it."""
    if name in ("Verdict", "catalog", "grade", "grade_all"):
        from . import policy

        return getattr(policy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Event", "Verdict", "catalog", "grade", "grade_all", "parse", "new_events", "next_state"]


# --- only new events count: a small state per node ----------------------------------------------------------


def new_events(events: list[Event], state: dict, boot_id: str | None) -> list[Event]:
    """Events after the last one seen (state["last_line"]) in this boot. When the last seen line is no longer in
    the log (new boot, log cleared or rotated), every event is new."""
    if not state or (boot_id and state.get("boot_id") not in (None, boot_id)):
        return events
    last = state.get("last_line")
    if not last:
        return events
    idx = None
    for i, e in enumerate(events):
        if e.line == last:
            idx = i
    if idx is None:
        return events
    return events[idx + 1 :]


def next_state(events: list[Event], boot_id: str | None) -> dict:
    return {"boot_id": boot_id, "last_line": events[-1].line if events else None}
