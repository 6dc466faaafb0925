"""Drained-node audit: who took each node out of service, why, since when, what it costs, what to do next.

Pure functions over node records (from Slurm or a captured file), the health log's records and the cause table
(`slurmkit/data/audit_causes.yaml`). gather.py reads Slurm, the health log and the nodes' own logs; resume.py acts
(`audit resume`); text.py prints the report for a human; `slurmkit/commands/audit.py` is the command.

Who: `slurmkit` (a reason starting with `drain.prefix`, written by slurmkit's checks), `slurm` (messages Slurm
writes itself: "Prolog error", "Not responding", ...), `other-checker` (NHC), `admin` (anything else: a person),
`unknown` (out of service with no reason in the capture).
"""

from __future__ import annotations

import json
import re
from ..record import Record, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from ..drain import check_of_tag
from ..errors import UsageError
from ..slurm.records import NOT_RESPONDING, NodeRecord, current_reason
from ..times import human_age, parse_time

DEFAULT_CAUSES = Path(__file__).resolve().parents[1] / "data" / "audit_causes.yaml"
SINFO_R_WIDTH = 20  # `sinfo -R` cuts reasons at 20 characters by default
OK_STATUSES = ("ok", "warn")


# --- the cause table ----------------------------------------------------------------------------------------------


class Cause(Record, kw_only=False):
    id: str
    by: str
    title: str
    next: str
    next_with_evidence: str | None = None
    tag: re.Pattern | None = None
    detail: re.Pattern | None = None
    match: re.Pattern | None = None
    text: str | None = None


class CauseTable(Record, kw_only=False):
    slurmkit: list[Cause]
    slurm: list[Cause]
    admin: Cause
    unknown: Cause
    _cache: dict = field(default_factory=dict, repr=False)

    def classify(self, reason: str, prefix: str) -> tuple[Cause, str | None]:
        """A node's reason -> (cause, slurmkit tag or None). Cached: a fleet has few distinct reasons."""
        key = (reason, prefix)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._classify(reason, prefix)
        return hit

    def _classify(self, reason: str, prefix: str) -> tuple[Cause, str | None]:
        reason = (reason or "").strip()
        if not reason:
            return self.unknown, None
        if prefix and reason.startswith(prefix):
            rest = reason[len(prefix) :]
            tag, _, detail = rest.partition(" ")
            for c in self.slurmkit:
                if c.tag and c.tag.search(tag) and (c.detail is None or c.detail.search(detail)):
                    return c, tag
            return self.slurmkit[-1], tag
        cut = len(reason) == SINFO_R_WIDTH  # maybe cut by `sinfo -R`: compare with the full message's start
        for c in self.slurm:
            if c.match and c.match.search(reason):
                return c, None
            if cut and c.text and c.text.lower().startswith(reason.lower()):
                return c, None
        return self.admin, None


def load_causes(path: str | Path | None = None) -> CauseTable:
    import yaml

    path = Path(path) if path else DEFAULT_CAUSES
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("cause table not found", path=str(path)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise UsageError(
            f"YAML error in cause table: {e}", path=str(path), line=mark.line + 1 if mark else None
        ) from None

    def cause(d: Any, by: str, where: str) -> Cause:  # checked: a mapping with id and next
        if not isinstance(d, dict) or "id" not in d or "next" not in d:
            raise UsageError(f"{where}: each cause needs at least id and next", path=str(path))
        try:
            rx = {k: re.compile(d[k], re.I) for k in ("tag", "detail", "match") if d.get(k)}
        except re.error as e:
            raise UsageError(f"{where} ({d['id']}): bad regex: {e}", path=str(path)) from None
        return Cause(
            id=d["id"],
            by=d.get("by", by),
            title=d["title"] if "title" in d else d["id"],
            next=d["next"],
            next_with_evidence=d.get("next_with_evidence"),
            text=d.get("text"),
            **rx,
        )

    if not isinstance(data, dict):
        raise UsageError("cause table: expected a mapping with slurmkit, slurm, admin, unknown", path=str(path))
    sk = [cause(d, "slurmkit", "slurmkit") for d in data.get("slurmkit") or []]
    if not sk:
        raise UsageError("cause table: the slurmkit list is empty", path=str(path))
    return CauseTable(
        slurmkit=sk,
        slurm=[cause(d, "slurm", "slurm") for d in data.get("slurm") or []],
        admin=cause(data.get("admin"), "admin", "admin"),
        unknown=cause(data.get("unknown"), "unknown", "unknown"),
    )


# --- times --------------------------------------------------------------------------------------------------------


def slurm_time(text: str | None) -> datetime | None:
    """Slurm's reason time (controller local time, no zone) -> aware datetime; None when missing or unreadable."""
    if not text or text in ("Unknown", "None"):
        return None
    try:
        return datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").astimezone()
    except ValueError:
        return None


log_time = parse_time  # a health-log time -> aware datetime (None when unreadable)


# --- which nodes, how many GPUs ------------------------------------------------------------------------------------

_OUT_FLAGS = {"DRAIN", "FAIL", "NOT_RESPONDING", "INVALID_REG"}


def out_of_service(rec: NodeRecord) -> bool:
    """Drained, draining, down, failing or not responding (or, from `sinfo -R`, listed with a reason)."""
    if rec.state == "DOWN" or _OUT_FLAGS.intersection(rec.flags):
        return True
    return rec.state == "UNKNOWN" and bool(rec.reason)


def condition(rec: NodeRecord) -> str:
    """drained | draining | down | failing | not-responding | listed (state not in the capture).

    Draining as Slurm itself words it (node_state_string, what `sinfo -o %T` prints): DRAIN on a node with jobs
    still on it, running (MIXED, ALLOCATED) or completing (the COMPLETING flag: `scontrol` says IDLE+COMPLETING+DRAIN
    while a job's epilog runs or its slurmd is gone), so every source of the same moment gives the same condition."""
    if rec.state == "DOWN":
        return "down"
    if "NOT_RESPONDING" in rec.flags:
        return "not-responding"
    if "FAIL" in rec.flags:
        return "failing"
    if "DRAIN" in rec.flags:
        busy = rec.state in ("MIXED", "ALLOCATED", "COMPLETING") or "COMPLETING" in rec.flags
        return "draining" if busy else "drained"
    return "listed"


def gpus_out(rec: NodeRecord) -> int:
    """GPUs no new job can get: all of them, except on a draining node the ones its running jobs still use."""
    if condition(rec) == "draining":
        return max(rec.gpus_total - rec.gpus_used, 0)
    return rec.gpus_total


# --- evidence from the health log -----------------------------------------------------------------------------------


def index_health_log(records: Iterable[dict]) -> dict[str, list[dict]]:
    """Health-log records by node, in file order."""
    out: dict[str, list[dict]] = {}
    for r in records:
        n = r.get("node")
        if isinstance(n, str):
            out.setdefault(n, []).append(r)
    return out


def find_evidence(
    rec: NodeRecord, cause: Cause, check: str | None, node_log: list[dict], *, limit: int, window: timedelta
) -> list[dict]:
    """The health-log records that explain this node's reason, newest first.

    A slurmkit drain: records whose reason is the node's reason (or starts with it, when the capture cut it),
    else failures of the same check near the drain time. A Slurm "Prolog error"/"Epilog error": slurmkit failures
    on that node near the drain time."""
    if not node_log:
        return []
    when = slurm_time(rec.reason_time)

    def near(r):
        if when is None:
            return True
        t = log_time(r.get("time"))
        return t is not None and abs(t - when) <= window

    failed = [r for r in node_log if r.get("status") == "fail" and r.get("context") != "audit"]
    if cause.by == "slurmkit":
        reason = rec.reason
        same = [
            r
            for r in failed
            if r.get("reason") == reason
            or (len(reason) == SINFO_R_WIDTH and str(r.get("reason", "")).startswith(reason))
        ]
        # the same reason may have drained the node before: the records of this drain first
        got = (
            [r for r in same if near(r)] or same or [r for r in failed if check and r.get("check") == check and near(r)]
        )
    elif cause.next_with_evidence:
        got = [r for r in failed if near(r)]
    else:
        got = []
    out = list(reversed(got))[:limit]
    if cause.by == "slurmkit":
        # remediation's steps (health.remediate: reboot asked, rebooted, recheck, flapping) belong to the story
        steps = [r for r in node_log if r.get("check") == "remediate" and r not in out]
        out = list(reversed(steps))[:limit] + out
    return out


# --- the audit --------------------------------------------------------------------------------------------------


class Entry(Record, kw_only=False):
    node: NodeRecord
    cause: Cause
    tag: str | None
    check: str | None
    age_seconds: float | None
    gpus_out: int
    evidence: list[dict]
    next_step: str
    history: dict | None = None  # {reason, user, time}: an older reason Slurm kept, not the cause (current_reason)

    @property
    def by(self) -> str:
        return self.cause.by

    def to_dict(self) -> dict:
        n = self.node
        return {
            "node": n.name,
            "state": n.state_text,
            "condition": condition(n),
            "reason": n.reason,
            "reason_history": self.history,
            "reason_user": n.reason_user,
            "reason_time": n.reason_time,
            "age_seconds": None if self.age_seconds is None else int(self.age_seconds),
            "age": human_age(self.age_seconds),
            "gpus_total": n.gpus_total,
            "gpus_out": self.gpus_out,
            "partitions": n.partitions,
            "by": self.by,
            "cause": self.cause.id,
            "cause_title": self.cause.title,
            "check": self.check,
            "next_step": self.next_step,
            "evidence": self.evidence,
        }


def audit(
    records: Iterable[NodeRecord],
    *,
    table: CauseTable,
    prefix: str,
    now: datetime,
    health: dict[str, list[dict]] | None = None,
    since: datetime | None = None,
    partitions: list[str] | None = None,
    evidence_per_node: int = 3,
    evidence_window: timedelta = timedelta(minutes=30),
) -> list[Entry]:
    """Out-of-service nodes, classified, oldest first (nodes of unknown age last)."""
    health = health or {}
    wanted = set(partitions) if partitions else None
    out: list[Entry] = []
    for rec in records:
        if not out_of_service(rec):
            continue
        if wanted is not None and not wanted.intersection(rec.partitions):
            continue
        text, history, old_time = current_reason(rec)
        when = None if old_time else slurm_time(rec.reason_time)
        if since is not None and when is not None and when < since:
            continue
        if not text and "NOT_RESPONDING" in rec.flags:
            text = NOT_RESPONDING  # Slurm's own flag says why, before (or without) a reason
        cause, tag = table.classify(text, prefix)
        if not text and rec.state == "DOWN":
            cause = table.unknown
        check = None
        if cause.by == "slurmkit":
            check = check_of_tag(tag)
        old = None
        if history is not None:  # the report's reason (and the evidence's) is today's part; the rest is history
            old = {"reason": history, "user": None, "time": None}
            if old_time:
                old.update(user=rec.reason_user, time=rec.reason_time)
                rec = replace(rec, reason=text, reason_user=None, reason_time=None)
            else:
                rec = replace(rec, reason=text)
        ev = (
            find_evidence(rec, cause, check, health.get(rec.name, []), limit=evidence_per_node, window=evidence_window)
            if evidence_per_node > 0
            else []
        )
        if cause.by == "slurmkit":
            check = next(
                (r["check"] for r in ev if isinstance(r.get("check"), str) and r["check"] != "remediate"), check
            )
        step = cause.next_with_evidence if (ev and cause.next_with_evidence) else cause.next
        if cause.by == "slurmkit" and check:
            step = step.replace("CHECK", check)
        out.append(
            Entry(
                node=rec,
                cause=cause,
                tag=tag,
                check=check,
                age_seconds=(now - when).total_seconds() if when else None,
                gpus_out=gpus_out(rec),
                evidence=ev,
                next_step=step,
                history=old,
            )
        )
    out.sort(key=lambda e: (e.age_seconds is None, -(e.age_seconds or 0), e.node.name))
    return out


def summarize(entries: list[Entry], *, price_per_gpu_hour: float = 0.0) -> dict:
    """Counts by cause and by who; GPU-hours lost so far (nodes of known age) and per day at this rate."""
    by_cause: dict[str, dict] = {}
    by_who: dict[str, dict] = {}
    lost = 0.0
    unknown_age = 0
    for e in entries:
        for key, bucket in ((e.cause.id, by_cause), (e.by, by_who)):
            b = bucket.setdefault(key, {"nodes": 0, "gpus_out": 0})
            b["nodes"] += 1
            b["gpus_out"] += e.gpus_out
        by_cause[e.cause.id]["title"] = e.cause.title
        if e.age_seconds is None:
            unknown_age += 1
        else:
            lost += e.gpus_out * max(e.age_seconds, 0) / 3600
    gpus = sum(e.gpus_out for e in entries)
    s = {
        "nodes": len(entries),
        "gpus_out": gpus,
        "by_who": by_who,
        "by_cause": by_cause,
        "gpu_hours_lost": round(lost, 2),
        "nodes_of_unknown_age": unknown_age,
        "gpu_hours_per_day": gpus * 24,
        "price_per_gpu_hour": price_per_gpu_hour,
    }
    if price_per_gpu_hour > 0:
        s["cost_so_far"] = round(lost * price_per_gpu_hour, 2)
        s["cost_per_day"] = round(gpus * 24 * price_per_gpu_hour, 2)
    return s


CSV_FIELDS = [
    "node",
    "state",
    "condition",
    "by",
    "cause",
    "check",
    "reason",
    "reason_user",
    "reason_time",
    "age_seconds",
    "gpus_total",
    "gpus_out",
    "partitions",
    "next_step",
    "evidence",
]


def csv_rows(entries: list[Entry]) -> list[list]:
    rows = []
    for e in entries:
        d = e.to_dict()
        d["partitions"] = ",".join(d["partitions"])
        d["evidence"] = " | ".join(str(r.get("reason") or r.get("check") or "") for r in e.evidence)
        rows.append(["" if d[k] is None else d[k] for k in CSV_FIELDS])
    return rows


# --- resume: what counts as "the check passed again" (the decision itself: drain.plan_resume) -----------------------

PASS_CONTEXTS = ("check", "audit")


def passed_since(node_log: list[dict], check: str | None, since: datetime | None) -> bool:
    """Has `check` passed on this node after the drain: an ok/warn record from a full run of the check
    (`slurmkit check`, or audit's own recheck)? Prolog and epilog passes do not count: they judge only what is new
    since their last run (an Xid already reported is not new), so they pass on a node that is still broken."""
    if not check or since is None:
        return False
    for r in node_log:
        if (
            r.get("check") == check
            and r.get("status") in OK_STATUSES
            and r.get("context") in PASS_CONTEXTS
            and partial_judgement(r) is None
        ):
            t = log_time(r.get("time"))
            if t is not None and t > since:
                return True
    return False


def partial_judgement(result: dict) -> str | None:
    """Why an ok result does not prove the fault is gone, or None. A kernel-log check that counts only events new
    since a mark (evidence `new_events` < `events_in_log`) says nothing about the event that drained the node:
    that Xid is still in the log until a reboot clears it."""
    ev = result.get("evidence")
    if isinstance(ev, dict):
        new, total = ev.get("new_events"), ev.get("events_in_log")
        if isinstance(new, int) and isinstance(total, int) and new < total:
            return (
                f"check {result.get('check')} judged only the {new} new of {total} kernel-log events; the event "
                f"that drained the node is still in the log (reboot the node, which clears it, then recheck)"
            )
    return None


def recheck_argv(template: list[str], node: str, check: str, values: dict[str, str] | None = None) -> list[str]:
    """Fill {node}, {check} and `values` ({slurmkit}, {config}, ...) into the configured argv, anywhere inside an
    argument; each stays one argument (no shell, no splitting)."""
    if not template:
        raise UsageError(
            "audit.recheck_command is empty: set it to an argv that runs "
            "`slurmkit check --json --only {check}` on {node}"
        )
    subs = {"node": node, "check": check, **(values or {})}

    def fill(arg: str) -> str:
        for k, v in subs.items():
            arg = arg.replace("{" + k + "}", v)
        return arg

    return [fill(a) for a in template]


def recheck_verdict(stdout: str, returncode: int, check: str) -> tuple[bool, str]:
    """`slurmkit check --json --only CHECK` output -> (passed, why). Passed: the check ran and said ok/warn."""
    try:
        data = json.loads(stdout)
    except ValueError:
        tail = (stdout or "").strip().splitlines()[-1:] or [""]
        return False, f"no JSON from the check (exit {returncode}): {tail[0][:200]}"
    if not isinstance(data, dict):
        return False, "check printed JSON that is not an object"
    results = [r for r in data.get("results") or [] if isinstance(r, dict) and r.get("check") == check]
    if not results:
        return False, f"check {check} did not run (results: {[r.get('check') for r in data.get('results') or []]})"
    bad = [r for r in results if r.get("status") not in OK_STATUSES]
    if bad:
        r = bad[0]
        return False, f"check {check} still {r.get('status')}: {r.get('reason') or ''}".rstrip(": ")
    for r in results:
        why = partial_judgement(r)
        if why:
            return False, why
    return True, f"check {check} passed ({', '.join(str(r.get('status')) for r in results)})"
