"""The drain etiquette (../shared/DESIGN.md), in one place: drain, resume, and a reason <-> its check.

- Reasons start with `settings.drain.prefix` and the check: `slurmkit:xid79 GPU 0000:3b:00 fell off the bus`,
  so the first 20 characters (all `sinfo -R` shows) say what happened.
- Never overwrite a reason slurmkit did not write; skip nodes that are down, drained by someone else, or in
  maintenance / reboot states. One drain at a time per node (a lock in paths.state_dir): of two prologs that find
  the same fault, one drains and the other finds the drain in place.
- A drain that could not be made (controller unreachable) is retried, and else recorded as pending in
  paths.state_dir; the next hook on the node drains it with slurmkit's reason (`drain_for_hook`).
- Only ever resume nodes slurmkit drained, and only once the check that drained them passes again
  (`plan_resume`); anyone else's reason only with --force, saying whose reason it overrides.

Every function returns what it did, as a short action string the health log records:
`drained`, `already-drained` (ours already: the first reason stays), `would-drain`,
`skipped-admin-drain`, `skipped-down`, `skipped-maintenance`, `skipped-unknown-node`, `drain-failed: ...`,
`resumed`, `would-resume`, `skipped-not-ours`, `skipped-not-drained`, `resume-failed: ...`.
"""

from __future__ import annotations

import json
import os
import re
import time
from .record import Record

from .errors import SlurmkitError
from .files import atomic_write
from .health.checks.registry import DRAIN_TAGS

MAX_REASON = 200
# node flags under which slurmkit leaves the node alone (a person or Slurm is working on it): no drain, no
# health run; the spellings of every Slurm version the backends read
HANDS_OFF = frozenset(
    {
        "MAINTENANCE",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "POWER_DOWN",
        "RESERVED_MAINT",
        "RES_MAINT",
    }
)
# the checks a reason tag can name, longest first where one is the start of another ("sxid" is the xid check's)
_CHECKS = DRAIN_TAGS
# outcomes after which no job can run on the node with the fault unreported: the verdict was acted on
ACTED = ("drained", "already-drained", "would-drain", "skipped-admin-drain", "not-drained (health.drain is false)")
FAILED = ("drain-failed", "resume-failed")


class Action(str):
    """What a drain or resume did: its kind ("drained", "skipped-admin-drain", "drain-failed", ...) and a detail
    (the error), as data; as text (the health log's `action`, audit's column) "kind" or "kind: detail"."""

    kind: str
    detail: str

    def __new__(cls, kind: str, detail: str = "") -> Action:
        a = super().__new__(cls, f"{kind}: {detail}" if detail else kind)
        a.kind, a.detail = kind, detail
        return a

    @property
    def failed(self) -> bool:
        """The controller did not take it (the node's state is unchanged)."""
        return self.kind in FAILED

    @property
    def acted(self) -> bool:
        return self.kind in ACTED


# what Slurm writes when a hook exits non-zero: ours to replace with the reason we could not write then
_HOOK_ERRORS = ("Prolog error", "Epilog error")
RETRY_DELAYS = (1.0, 2.0)  # between drain attempts inside a hook
LOCK_WAIT = 30.0  # seconds a hook waits for another hook's drain on the same node


def is_slurmkit_reason(reason: str | None, settings) -> bool:
    """True when slurmkit wrote this drain reason (it starts with the configured prefix)."""
    return reason is not None and reason.strip().startswith(settings.drain.prefix)


def check_of_tag(tag: str | None) -> str | None:
    """The check that writes a reason tag: 'xid79' -> 'xid', 'sxid20034' -> 'xid', 'gpu_count' -> 'gpu_count'."""
    if not tag:
        return None
    for name in _CHECKS:
        if tag.startswith(name):
            return "xid" if name == "sxid" else name
    m = re.match(r"^([A-Za-z_]+?)_?\d*$", tag)
    return m.group(1) if m else tag


def tag_of_reason(reason: str | None, settings) -> str | None:
    """'slurmkit:xid79 GPU ...' -> 'xid79'; None for a reason slurmkit did not write."""
    if reason is None or not is_slurmkit_reason(reason, settings):
        return None
    return reason.strip()[len(settings.drain.prefix) :].split(" ", 1)[0] or None


def check_of_reason(reason: str | None, settings) -> str | None:
    """The check that wrote a slurmkit reason: 'slurmkit:xid79 GPU ...' -> 'xid', 'slurmkit:ecc ...' -> 'ecc'.
    None for a reason slurmkit did not write. Resume a node only after this check passes again."""
    return check_of_tag(tag_of_reason(reason, settings))


def reason_for(settings, check: str, detail: str) -> str:
    """`<prefix><check> <detail>` on one line, cut to what Slurm keeps comfortably."""
    detail = " ".join(str(detail).split())
    text = f"{settings.drain.prefix}{check} {detail}".strip()
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def reason_for_result(settings, result) -> str:
    return reason_for(settings, result.code or result.check, result.reason)


def acted(action: str) -> bool:
    """Was the verdict acted on (the node drained, or a drain in place)? Else the fault stays pending."""
    return action.acted if isinstance(action, Action) else action in ACTED


def _lookup(settings, backend, node: str, verb: str):
    """(the backend, the node's record or None, an Action when the controller could not be asked)."""
    if backend is None:
        from .slurm import get_backend

        backend = get_backend(settings)
    try:
        recs = backend.nodes(node)
    except SlurmkitError as e:
        return backend, None, Action(f"{verb}-failed", str(e))
    rec = next((r for r in recs if r.name == node), None)
    return backend, rec, None if rec is not None else Action("skipped-unknown-node")


# --- one drain at a time per node ------------------------------------------------------------------------------


class _NodeLock:
    """flock on `<state_dir>/drain-<node>.lock`, waited for up to LOCK_WAIT seconds (then the drain goes ahead:
    a stuck lock holder must not stop a drain). No state_dir (read-only, missing): no lock."""

    def __init__(self, settings, node: str):
        self.path = os.path.join(settings.paths.state_dir, f"drain-{node}.lock")
        self.fd: int | None = None

    def __enter__(self):
        import fcntl

        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return self
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    return self
                time.sleep(0.05)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
        return False


def drain_node(
    settings, node: str, reason: str, *, backend=None, dry_run: bool = False, replace_hook_error: bool = False
) -> Action:
    """Drain `node` with `reason` (which must carry slurmkit's prefix), following the etiquette.
    `replace_hook_error`: Slurm's own "Prolog error"/"Epilog error" drain (which a slurmkit hook that could not
    drain caused) is replaced by `reason`; used only for a pending drain slurmkit recorded itself."""
    if not is_slurmkit_reason(reason, settings):
        raise ValueError(f"drain reason must start with {settings.drain.prefix!r}: {reason!r}")
    with _NodeLock(settings, node):
        backend, rec, why = _lookup(settings, backend, node, "drain")
        if why:
            return why
        if rec.state == "DOWN" or "NOT_RESPONDING" in rec.flags:
            return Action("skipped-down")
        if HANDS_OFF & set(rec.flags):
            return Action("skipped-maintenance")
        if rec.drained or "FAIL" in rec.flags:
            if replace_hook_error and (rec.reason or "").strip() in _HOOK_ERRORS:
                pass  # ours to replace: fall through to the drain
            elif not is_slurmkit_reason(rec.reason, settings):
                return Action("skipped-admin-drain")
            else:
                # ours already: keep the first reason, usually the root cause (a hung nvidia-smi in the prolog,
                # then the epilog's ECC read timing out on the same hang, must not bury the first finding)
                return Action("already-drained")
        if dry_run:
            return Action("would-drain")
        try:
            backend.drain(node, reason)
        except SlurmkitError as e:
            return Action("drain-failed", str(e))
        return Action("drained")


# --- a drain that could not be made: retried, then pending ------------------------------------------------------


def pending_path(settings, node: str) -> str:
    return os.path.join(settings.paths.state_dir, f"pending-drain-{node}.json")


def read_pending(settings, node: str) -> dict | None:
    """The pending drain recorded for `node` ({"reason", "check", "context", "job_id", "time", "error"}), or None.
    An unreadable record is still a pending drain (of unknown cause): never a healthy node."""
    path = pending_path(settings, node)
    if not os.path.lexists(path):
        return None
    try:
        from .bounded import read_text

        text = read_text(path, limit=64 * 1024, what="pending-drain record")
    except (OSError, SlurmkitError) as e:
        return {"reason": reason_for(settings, "pending", f"unreadable pending-drain record: {e}"), "check": None}
    try:
        rec = json.loads(text)
        if isinstance(rec, dict) and is_slurmkit_reason(rec.get("reason"), settings):
            return rec
    except ValueError:
        pass
    return {"reason": reason_for(settings, "pending", "unreadable pending-drain record"), "check": None}


def _write_pending(settings, node: str, rec: dict) -> str | None:
    path = pending_path(settings, node)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps(rec), mode=0o600)
    except OSError as e:
        return str(e)
    return None


def clear_pending(settings, node: str) -> None:
    try:
        os.unlink(pending_path(settings, node))
    except FileNotFoundError:
        pass


def drain_for_hook(
    settings,
    node: str,
    reason: str,
    *,
    check: str | None,
    context: str,
    job_id=None,
    backend=None,
    replace_hook_error: bool = False,
) -> Action:
    """A hook's drain: retried (RETRY_DELAYS, within health.budget_seconds) while the controller does not answer;
    a node the controller does not list is a drain that failed (the hook runs on a node Slurm knows: an empty
    answer is a controller that did not answer). When it still fails, a pending record keeps the reason for the
    next hook; the caller exits non-zero so Slurm drains the node ("Prolog error"/"Epilog error") meanwhile."""
    action = Action("drain-failed")
    deadline = time.monotonic() + settings.health.budget_seconds  # a hook never retries past its checks' budget
    for delay in (0.0, *RETRY_DELAYS):
        if delay:
            if time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
        action = drain_node(settings, node, reason, backend=backend, replace_hook_error=replace_hook_error)
        if action.kind == "skipped-unknown-node":
            action = Action("drain-failed", f"the controller did not list node {node}")
        if not action.failed:
            break
    if action.acted:
        clear_pending(settings, node)
    elif action.failed:
        err = _write_pending(
            settings,
            node,
            {
                "reason": reason,
                "check": check,
                "context": context,
                "job_id": job_id,
                "error": action,
                "time": time.time(),
            },
        )
        more = "recorded as pending" if err is None else f"cannot record it as pending: {err}"
        action = Action(action.kind, f"{action.detail}; {more}" if action.detail else more)
    return action


# --- resume --------------------------------------------------------------------------------------------------------


def resume_node(settings, node: str, *, backend=None, dry_run: bool = False, force: bool = False) -> Action:
    """Resume `node` only when slurmkit drained it (its reason carries the prefix); `force` resumes any drain."""
    backend, rec, why = _lookup(settings, backend, node, "resume")
    if why:
        return why
    if not (rec.drained or "FAIL" in rec.flags or (force and rec.state == "DOWN")):
        return Action("skipped-not-drained")
    if not force and not is_slurmkit_reason(rec.reason, settings):
        return Action("skipped-not-ours")
    if dry_run:
        return Action("would-resume")
    try:
        backend.resume(node)
    except SlurmkitError as e:
        return Action("resume-failed", str(e))
    return Action("resumed")


class ResumeDecision(Record, kw_only=False):
    """What `audit resume` does with one node, and why."""

    node: str
    action: str  # resume | recheck | refuse | skip
    why: str
    check: str | None = None
    overrides: dict | None = None  # whose reason a forced resume overrides

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "action": self.action,
            "why": self.why,
            "check": self.check,
            "overrides": self.overrides,
        }


_WHO = {"admin": "an admin", "slurm": "Slurm itself", "other-checker": "another health checker", "unknown": "someone"}


def plan_resume(entry, name: str, *, force: bool, recheck: bool, passed_since_drain: bool) -> ResumeDecision:
    """What a resume may do with one node, before any check runs. `entry`: who drained it (`.by`: "slurmkit",
    "admin", "slurm" ...), `.check` that drained it and `.node` (its NodeRecord), as `slurmkit audit` classifies
    it; None when the node is not out of service.

    slurmkit's own drain: resume once its check has passed again (a later `ok` in the health log, or a recheck
    now). Anyone else's reason: only with --force, and the decision names whose reason it overrides."""
    if entry is None:
        return ResumeDecision(name, "skip", "not out of service")
    n = entry.node
    if entry.by == "slurmkit":
        if recheck:
            return ResumeDecision(name, "recheck", f"rerun check {entry.check} on {name}", check=entry.check)
        if passed_since_drain:
            return ResumeDecision(name, "resume", f"check {entry.check} has passed since the drain", check=entry.check)
        if force:
            return ResumeDecision(
                name, "resume", f"--force: check {entry.check} has not passed since the drain", check=entry.check
            )
        return ResumeDecision(
            name,
            "refuse",
            f"check {entry.check} has not passed since slurmkit drained it "
            f"({n.reason!r}); run with --recheck to run it now",
            check=entry.check,
        )
    who = _WHO.get(entry.by, entry.by)
    owner = {"by": entry.by, "user": n.reason_user, "reason": n.reason, "time": n.reason_time}
    desc = (
        f"{who}"
        + (f" ({n.reason_user})" if n.reason_user else "")
        + (f": {n.reason!r}" if n.reason else ": no reason")
        + (f" set {n.reason_time}" if n.reason_time else "")
    )
    if force:
        return ResumeDecision(name, "resume", f"--force: overriding the reason of {desc}", overrides=owner)
    return ResumeDecision(
        name, "refuse", f"not drained by slurmkit but by {desc}; --force overrides it", overrides=owner
    )
