"""Remediation (opt-in, `health.remediate`): a health run reboots an idle node that slurmkit drained for a cause a
reboot fixes, keeps it out of service until its recheck passes, and gives up on a node that keeps failing.

- Only a slurmkit drain (the reason carries the prefix; never an admin's), only a node with no job, only when the
  cause's action (the Xid catalog's or the kernel-log signature's: "xid79" -> RESTART_BM) is in
  `health.remediate_actions`: `scontrol reboot reason="slurmkit:<tag> remediation ..."`, without ASAP and without
  nextstate, so the node comes back still drained with slurmkit's reason (measured on 22.05 and 24.11; Slurm
  clears the drain after an ASAP or nextstate reboot, and a node back as idle would take jobs before its recheck).
- After the reboot (a new boot id) the health run first holds the node (a reboot that timed out comes back DOWN
  without the drain, and ReturnToService=2 would return it idle: `held` drains it again), then rechecks the whole
  profile. Once the recheck has passed and slurmd has registered, slurmkit resumes the node (`resumed`); a
  recheck that fails leaves it drained, and the next run reboots it again. A node back in service after a passed
  recheck without slurmkit's resume (Slurm times a reboot out and drops the drain after that first run; someone
  resumed it) is logged once as `returned`.
- The flap limit: after `health.remediate_flap_limit` reboots of one node within the window, no more reboots:
  the node stays drained as `slurmkit:flapping <cause> xN in 24h` for a human.

Every step is a health-log record (check "remediate", action = the step: reboot-asked, reboot-failed: ...,
held, hold-failed: ..., rebooted, recheck-passed, recheck-failed, resumed, resume-failed: ..., returned, flapping,
flap-drain-failed: ...; `slurmkit health --dry-run` prints the decision and logs nothing), and the count of
reboots comes from those records: the policy is a pure function over the node's own log (`decide`,
`after_reboot`). Light imports: the health hook runs it.
"""

from __future__ import annotations

import re
import time
from ..record import Record
from ..times import parse_utc_iso, utc_iso

CHECK = "remediate"
ASKED = "reboot-asked"
HELD = "held"
PASSED = "recheck-passed"
FLAPPING_TAG = "flapping"
_XID_TAG = re.compile(r"^s?xid(\d+)$")
_BUSY = {"ALLOCATED", "MIXED", "COMPLETING"}
_REBOOTING = {"REBOOT_REQUESTED", "REBOOT_ISSUED"}
# what Slurm appends to a reboot's reason, and what remediation put before the cause's own detail
_SLURM_SUFFIX = re.compile(r"\s*:\s*reboot (issued|timed out)\b", re.IGNORECASE)
_OWN_TEXT = re.compile(r"^(remediation reboot \d+/\d+:\s*)+")
HOLD_NOTE = " (held until its recheck passes)"


def cause_action(tag: str | None) -> str | None:
    """What the Xid catalog or the kernel-log signatures say fixes the cause a drain tag names: "xid79" ->
    "RESTART_BM", "sxid20034" -> "RESET_GPU", "xid_gpulost" -> the signature's action; None when no table knows it
    (a check's own tag like "ecc" or "nccl": no reboot)."""
    if not tag:
        return None
    if tag.startswith("sxid"):
        return "RESET_GPU"
    m = _XID_TAG.match(tag)
    if m:
        from .kernlog.policy import catalog

        entry = catalog().get("xid", {}).get(m.group(1))
        return entry.get("action") if isinstance(entry, dict) else None
    from .kernlog.signatures import data

    for sig in data().get("signatures", ()):
        if sig.get("code") == tag and sig.get("status", "fail") == "fail":
            return sig.get("action", "RESTART_BM")
    return None


def record_time(rec: dict) -> float | None:
    t = rec.get("time")
    if not isinstance(t, str):
        return None
    try:
        return parse_utc_iso(t)
    except ValueError:
        return None


def steps(records) -> list[dict]:
    """The remediation records among a node's health-log records, in file order."""
    return [r for r in records if isinstance(r, dict) and r.get("check") == CHECK]


def reboots_in_window(records, now: float, window_seconds: float) -> int:
    """How many reboots slurmkit asked for within the window (a record with no readable time counts: the limit
    fails safe, towards a human)."""
    n = 0
    for r in steps(records):
        if r.get("action") != ASKED:
            continue
        t = record_time(r)
        if t is None or now - t <= window_seconds:
            n += 1
    return n


def after_reboot(records, boot_id: str | None) -> dict | None:
    """The `reboot-asked` record this boot follows (its boot id differs from now and no later step says the
    recheck ran), or None. An unreadable boot id is no new boot."""
    if not boot_id:
        return None
    last = next(iter(r for r in reversed(steps(records)) if r.get("action") != HELD), None)
    if last is None or last.get("action") != ASKED:
        return None
    before = (last.get("evidence") or {}).get("boot_id")
    return last if before and before != boot_id else None


class Decision(Record, kw_only=False):
    """What remediation does with a drained node now: nothing, a reboot, or flapping."""

    step: str  # none | reboot | flapping | resume | returned
    why: str
    tag: str | None = None
    count: int = 0  # reboots within the window so far


def decide(
    rec, records, *, prefix: str, actions, limit: int, window_seconds: float, now: float, healthy: bool = False
) -> Decision:
    """What remediation does with a node (pure): `rec` its Slurm record now, `records` its health-log records,
    `healthy` whether this run's checks (the whole profile: the node is drained and idle) all passed."""
    if rec is None:
        return Decision("none", "the node's state is unknown")
    reason = (rec.reason or "").strip()
    last = next(iter(r for r in reversed(steps(records)) if r.get("action") != HELD), None)
    if "DRAIN" not in rec.flags:
        if last is not None and last.get("action") == PASSED and _in_service(rec):
            # back in service, but not by slurmkit: Slurm ended a reboot it counted as timed out (it drops the
            # drain; the first run of the new boot came before that, so there was nothing to hold) or someone
            # resumed it. The story ends here, once: the next run's last step is this one
            cause = (last.get("evidence") or {}).get("cause") or None
            return Decision("returned", "back in service without slurmkit's resume; its recheck had passed", cause)
        return Decision("none", "not drained")
    if not reason.startswith(prefix):
        return Decision("none", "not drained by slurmkit")
    tag = reason[len(prefix) :].split(" ", 1)[0] or None
    if last is not None and last.get("action") == PASSED and tag != FLAPPING_TAG:
        if not _in_service(rec):
            return Decision("none", "the recheck after the reboot passed: resumed once slurmd has registered", tag)
        if healthy:
            return Decision("resume", "the recheck after slurmkit's reboot passed, and this run's checks too", tag)
        # failing again after the recheck passed: a reboot (counted) as for any drain of a reboot cause
    if _REBOOTING & set(rec.flags):
        return Decision("none", "a reboot is under way")
    if rec.state in _BUSY or rec.cpus_alloc or rec.gpus_used or rec.state == "DOWN" or "NOT_RESPONDING" in rec.flags:
        return Decision("none", f"node is {rec.state_text}: no reboot while a job runs or slurmd is away")
    if tag == FLAPPING_TAG:
        return Decision("none", "flapping: left for a human", tag)
    action = cause_action(tag)
    if action is None or action not in actions:
        return Decision("none", f"cause {tag} ({action or 'no catalog action'}) is not one a reboot fixes here", tag)
    n = reboots_in_window(records, now, window_seconds)
    if n >= limit:
        return Decision("flapping", f"{n} reboots in the window (limit {limit})", tag, n)
    return Decision("reboot", f"cause {tag}: {action}; reboot {n + 1} of at most {limit} in the window", tag, n)


def _in_service(rec) -> bool:
    """Up and registered: not rebooting, not DOWN, responding."""
    return not (_REBOOTING & set(rec.flags)) and rec.state != "DOWN" and "NOT_RESPONDING" not in rec.flags


def flapping_reason(prefix: str, tag: str, count: int, window_hours: float) -> str:
    return f"{prefix}{FLAPPING_TAG} {tag} x{count} in {window_hours:g}h"


def cause_detail(reason: str, prefix: str, tag: str) -> str:
    """The cause's own words in a slurmkit reason (pure): without the prefix and tag, an earlier remediation's
    text, the hold note, or what Slurm appended to a reboot's reason (" : reboot issued", " : reboot timed out")."""
    d = reason.strip()
    if d.startswith(prefix + tag):
        d = d[len(prefix) + len(tag) :]
    d = _SLURM_SUFFIX.sub("", d).replace(HOLD_NOTE.strip(), "").strip()
    return _OWN_TEXT.sub("", d).strip()


def reboot_reason(prefix: str, tag: str, count: int, limit: int, detail: str) -> str:
    """`slurmkit:<tag> remediation reboot 1/3: <the drain's detail>`: still the cause's tag first, so the reason
    names the check that drained the node."""
    from ..drain import MAX_REASON

    text = " ".join(f"{prefix}{tag} remediation reboot {count + 1}/{limit}: {cause_detail(detail, '', '')}".split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def hold_reason(prefix: str, asked: dict) -> str:
    """The drain that keeps a rebooted node out of service until its recheck: the reboot's own reason, noted."""
    from ..drain import MAX_REASON

    cause = str((asked.get("evidence") or {}).get("cause") or "remediate")
    base = str(asked.get("reason") or "").strip() or f"{prefix}{cause} remediation reboot"
    if not base.startswith(prefix):
        base = f"{prefix}{cause} {base}"
    base = base[: MAX_REASON - len(HOLD_NOTE)]
    return base + HOLD_NOTE


# --- the shell: Slurm and the health log ----------------------------------------------------------------------


def history(settings, node: str) -> list[dict] | None:
    """The node's health-log records within the flap window (plus the slack the log reader keeps); None when the
    log cannot be read: then the reboots cannot be counted, and remediation does nothing (fail closed)."""
    from .. import healthlog

    since = time.time() - settings.health.remediate_flap_window_hours * 3600
    stamp = utc_iso(since)
    try:
        return list(healthlog.read(settings.paths.health_log, node=node, since=stamp))
    except (OSError, ValueError):
        return None


def _log(settings, node: str, step: str, status: str, reason: str, evidence: dict, *, must: bool = False) -> dict:
    """Write one step to the health log. `must`: the step is what the flap limit counts, so an OSError is
    raised (the caller then does not reboot: a reboot nobody can count could loop forever)."""
    from .. import healthlog

    rec = healthlog.record(
        check=CHECK, status=status, reason=reason, evidence=evidence, context="health", node=node, action=step
    )
    try:
        healthlog.write(settings, [rec])
    except OSError as e:
        if must:
            raise
        from ..logsinks import alert

        alert(
            f"health: node {node}: cannot write the health log {settings.paths.health_log}: {e}; remediation step"
            f" {step} is not recorded"
        )
    return rec


def recheck_done(settings, node: str, asked: dict, report, boot_id: str, action: str = "none") -> list[dict]:
    """The first health run of a new boot after slurmkit's reboot: `rebooted`, then the recheck's verdict
    (`action`: what the run's drain did)."""
    ev = {
        "boot_id": boot_id,
        "asked": asked.get("time"),
        "cause": (asked.get("evidence") or {}).get("cause"),
        "drain": action,
    }
    out = [_log(settings, node, "rebooted", "ok", f"new boot {boot_id} after the reboot of {asked.get('time')}", ev)]
    if report.healthy:
        out.append(_log(settings, node, "recheck-passed", "ok", "every check passed after the reboot", ev))
    else:
        f = report.failures[0]
        out.append(
            _log(
                settings,
                node,
                "recheck-failed",
                "fail",
                f"{f.code or f.check} failed again after the reboot: {f.reason}",
                ev,
            )
        )
    return out


def decision(settings, rec, records, healthy: bool = False) -> Decision:
    """`decide` with the site's settings, now."""
    h = settings.health
    return decide(
        rec,
        records,
        prefix=settings.drain.prefix,
        actions=h.remediate_actions,
        limit=h.remediate_flap_limit,
        window_seconds=h.remediate_flap_window_hours * 3600,
        now=time.time(),
        healthy=healthy,
    )


def hold(settings, node: str, asked: dict, *, backend) -> dict | None:
    """The first run of the boot after slurmkit's reboot, before its checks: the node stays out of service until
    its recheck passes. A reboot that ran its course keeps slurmkit's drain; one that timed out comes back DOWN
    without it (22.05, measured), and ReturnToService=2 would return it idle at registration: drain it again with
    the reboot's reason. Someone else's drain, or ours in place, is left as it is. Returns the step's record."""
    from ..errors import SlurmkitError

    try:
        rec = next((r for r in backend.nodes(node) if r.name == node), None)
    except SlurmkitError:
        rec = None  # unknown: drain anyway (a drain of a drained node only renews slurmkit's own reason)
    if rec is not None and "DRAIN" in rec.flags:
        return None
    reason = hold_reason(settings.drain.prefix, asked)
    ev = {"cause": (asked.get("evidence") or {}).get("cause"), "was": rec.reason if rec else None}
    try:
        backend.drain(node, reason)
    except SlurmkitError as e:
        return _log(settings, node, f"hold-failed: {e}", "fail", reason, ev)
    return _log(settings, node, HELD, "warn", reason, ev)


def act(settings, node: str, *, backend, boot_id: str | None, records, healthy: bool = False) -> dict | None:
    """Look the node up now (a drain may have just been made) and reboot it, resume it after its recheck passed,
    mark it flapping, or do nothing. Returns the step's health-log record (None when nothing was done)."""
    from ..errors import SlurmkitError

    h = settings.health
    prefix = settings.drain.prefix
    if records is None:
        return None  # the log could not be read: no count, no reboot
    try:
        rec = next((r for r in backend.nodes(node) if r.name == node), None)
    except SlurmkitError:
        return None  # the next run decides; nothing is done on a state that could not be read
    d = decision(settings, rec, records, healthy)
    if d.step == "returned" and rec is not None:
        return _log(settings, node, "returned", "ok", d.why, {"cause": d.tag, "boot_id": boot_id, "state": rec.state})
    if d.step == "none" or rec is None or d.tag is None:  # decide() says "none" for an unknown node or cause
        return None
    if d.step == "resume":
        ev = {"cause": d.tag, "boot_id": boot_id, "was": rec.reason}
        try:
            backend.resume(node)
        except SlurmkitError as e:
            return _log(settings, node, f"resume-failed: {e}", "fail", rec.reason, ev)
        return _log(settings, node, "resumed", "ok", f"back in service: {d.why}", ev)
    ev = {
        "cause": d.tag,
        "reboots_in_window": d.count,
        "limit": h.remediate_flap_limit,
        "window_hours": h.remediate_flap_window_hours,
        "boot_id": boot_id,
        "was": rec.reason,
    }
    if d.step == "flapping":
        reason = flapping_reason(prefix, d.tag, d.count, h.remediate_flap_window_hours)
        step, status, call, failed = "flapping", "fail", backend.drain, "flap-drain-failed"
    else:
        detail = rec.reason.strip()[len(prefix) + len(d.tag) :].strip()
        reason = reboot_reason(prefix, d.tag, d.count, h.remediate_flap_limit, detail)
        step, status, call, failed = ASKED, "warn", backend.reboot, "reboot-failed"
        try:  # counted first: a reboot whose record cannot be written is not asked for
            asked = _log(settings, node, ASKED, status, reason, ev, must=True)
        except OSError as e:
            return {"action": f"reboot-not-asked: cannot write the health log ({e})", "reason": reason}
    try:
        call(node, reason)
    except SlurmkitError as e:
        return _log(settings, node, f"{failed}: {e}", "fail", reason, ev)
    return asked if step == ASKED else _log(settings, node, step, status, reason, ev)
