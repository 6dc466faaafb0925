"""straggler: this node lagged the other nodes of its multi-node jobs (issue 34). One slow node sets the pace of every
synchronous step of a job; `slurmkit efficiency JOBID` names it, and this check makes it the node's own verdict.

Input: the job-efficiency log, where every node's epilog appends its record of the job first thing (efficiency/
hooks.stop), with the job's node list. The node judges itself, against its peers' records of the same run
(efficiency/straggler: medians of SM clock, activity and power, the margin `efficiency.straggler_margin_pct`):
- in the epilog, the job that just ended, once every peer's record is in (the check runs last, after the others,
  and waits up to `efficiency.straggler_epilog_wait` seconds for a peer whose epilog started later);
- in the health program, the multi-node runs of its own that ended within `efficiency.straggler_wait_minutes` and
  are not judged yet (a peer's epilog was later than this one's); past that wait, a run is left unjudged, said so.
A run it lagged in is a warn (the health log: the measures and the likely cause); the run that makes
`efficiency.straggler_drain_after` lags within `efficiency.straggler_window_hours`, counted since its last
straggler drain, is a fail: the node is drained `slurmkit:straggler`, left for a human (the flap-limit pattern).
The health log remembers what was judged: `judged` and `lagged` hold the runs as `JOBID@START` words.
Elsewhere (`slurmkit check`, the audit recheck) it does not run: a straggler is a history, not a reading of now.
"""

from __future__ import annotations

import time

from ...times import utc_iso
from ...efficiency.straggler import describe, judge, run_token, same_run
from ..base import Result
from ..context import NoData

NAME = "straggler"
PROFILES = ("epilog", "health")
POLL = 0.25  # seconds between the epilog's looks for its peers' records


def _words(rec: dict, key: str) -> list[str]:
    v = (rec.get("evidence") or {}).get(key)
    return v.split() if isinstance(v, str) else []


def history(records: list[dict]) -> tuple[set[str], list[str]]:
    """The node's straggler records in the health log (oldest first) -> (runs judged, runs lagged in since its
    last straggler drain)."""
    judged: set[str] = set()
    lagged: list[str] = []
    for r in records:
        if r.get("check") != NAME:
            continue
        judged.update(_words(r, "judged"))
        if r.get("status") == "fail":
            lagged = []  # drained for it: a human resumed it, the count starts again
        else:
            lagged += [w for w in _words(r, "lagged") if w not in lagged]
    return judged, lagged


def evaluate(
    found: list[dict], lagged_before: list[str], s, *, pending: list[str], unjudged: list[tuple[str, str]]
) -> Result:
    """The verdict (pure). `found`: the runs judged now, each {"token", "job_id", "straggler": judge()'s entry or
    None}; `lagged_before`: runs lagged in since the last drain (history); `pending`: runs whose peers' records are
    not in yet ("JOBID (n3, n4)"); `unjudged`: runs given up on, (token, why); `s`: the efficiency settings."""
    lags = [f for f in found if f["straggler"]]
    count = len(set(lagged_before) | {f["token"] for f in lags})
    ev: dict = {
        "judged": " ".join([f["token"] for f in found] + [token for token, _ in unjudged]),
        "lagged": " ".join(f["token"] for f in lags),
        "lags": count,
        "window_hours": s.straggler_window_hours,
        "drain_after": s.straggler_drain_after,
    }
    if lags:
        last = lags[-1]
        said = describe(last["straggler"])
        ev["stragglers"] = [dict(f["straggler"], job_id=f["job_id"]) for f in lags]
        if s.straggler_drain_after and count >= s.straggler_drain_after:
            why = (
                f"lagged its jobs' other nodes in {count} job{'s' if count != 1 else ''} in {s.straggler_window_hours:g}h (limit"
                f" {s.straggler_drain_after}); job {last['job_id']}: {said}"
            )
            return Result(NAME, "fail", why, ev, code=NAME)
        limit = f"; drained at {s.straggler_drain_after}" if s.straggler_drain_after else ""
        why = (
            f"lagged the other nodes of job {last['job_id']}: {said} ({count} in {s.straggler_window_hours:g}h{limit})"
        )
        return Result(NAME, "warn", why, ev)
    if found:
        jobs = ", ".join(str(f["job_id"]) for f in found)
        return Result(NAME, "ok", f"kept pace with the other nodes of job {jobs}", ev)
    if unjudged:
        return Result(NAME, "skip", "not judged: " + "; ".join(why for _, why in unjudged), ev)
    if pending:
        return Result(NAME, "skip", "waiting for the other nodes' records of job " + "; ".join(pending), ev)
    raise NoData("no multi-node job of this node left to judge")


def _several(nodelist) -> bool:
    """A node list of more than one node, read off the text ("n[1-2]", "a,b")."""
    return isinstance(nodelist, str) and ("," in nodelist or "[" in nodelist)


def run(ctx) -> Result:
    if NAME in ctx.captures:
        raise NoData("straggler reads the job-efficiency log; `slurmkit efficiency JOBID` shows a job's stragglers")
    if ctx.profile not in PROFILES and NAME in ctx.explicit:
        raise NoData(
            "a straggler is judged from the node's multi-node jobs, by its epilog and health program; once its"
            " cause is fixed, a human resumes it: `slurmkit audit resume NODE --force`"
        )
    s = ctx.settings.efficiency
    if not s.enabled:
        raise NoData("efficiency is off (efficiency.enabled): no records to compare")
    if ctx.job_id is not None and not _several(ctx.job_nodelist):
        raise NoData(f"job {ctx.job_id} ran on this node alone: no other node to keep pace with")  # no I/O: most jobs
    from ... import healthlog
    from ...efficiency.record import log_path

    now = time.time()
    wait = s.straggler_wait_minutes * 60
    eff_log = log_path(ctx.settings)
    # twice the wait: a run that waited out its wait is said once (unjudged) by the health program's next run
    mine = list(healthlog.read(eff_log, node=ctx.node, since=utc_iso(now - 2 * wait)))
    if ctx.job_id is not None:  # the epilog: the run that just ended here (its record was the epilog's first act)
        runs = [r for r in mine if r.get("job_id") == ctx.job_id][-1:]
        if not runs:
            raise NoData(f"no efficiency record of job {ctx.job_id} on this node (a job without GPUs has none)")
    else:
        runs = [r for r in mine if _several(r.get("nodelist"))]
    if not runs:
        raise NoData("no multi-node job of this node to judge")
    back = max(s.straggler_window_hours * 3600, 2 * wait)
    past = list(healthlog.read(ctx.settings.paths.health_log, node=ctx.node, since=utc_iso(now - back)))
    judged, lagged_before = history(past)
    found: list[dict] = []
    pending: list[str] = []
    unjudged: list[tuple[str, str]] = []
    for rec in runs:
        token = run_token(rec)
        if token in judged:
            continue
        nodes = _nodes(rec)
        if isinstance(nodes, str):
            unjudged.append((token, f"job {rec.get('job_id')}: {nodes}"))
            continue
        peers = [n for n in nodes if n != ctx.node]
        if not peers:
            if ctx.job_id is not None:
                raise NoData(f"job {ctx.job_id} ran on this node alone: no other node to keep pace with")
            continue
        # the epilog waits a little for peers whose epilogs started later (bounded: the health program does the rest)
        give_up = time.monotonic() + (s.straggler_epilog_wait if ctx.job_id is not None else 0)
        since = utc_iso((rec.get("start") or now) - 60)
        while True:
            got = healthlog.read_bounded(eff_log, {n: since for n in peers})
            theirs = {n: same_run(got.get(n) or [], rec) for n in peers}
            missing = [n for n, r in theirs.items() if r is None]
            if not missing or time.monotonic() >= give_up:
                break
            time.sleep(POLL)
        if missing:
            names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            if ctx.job_id is None and now - (rec.get("end") or now) > wait:
                unjudged.append((token, f"job {rec.get('job_id')}: no record from {names} in {wait / 60:g} min"))
            else:
                pending.append(f"{rec.get('job_id')} ({names})")
            continue
        full = {n: r for n, r in theirs.items() if r is not None}
        x = judge(rec, full, s.straggler_margin_pct)
        found.append({"token": token, "job_id": rec.get("job_id"), "straggler": x})
    return evaluate(found, lagged_before, s, pending=pending, unjudged=unjudged)


def _nodes(rec: dict) -> list[str] | str:
    """The run's nodes from its record's node list, else why not (a string)."""
    expr = rec.get("nodelist")
    if not isinstance(expr, str) or not expr:
        return "its record has no node list (written by a slurmkit before the straggler check)"
    from ...hostlist import HostlistError, expand

    try:
        return expand(expr, limit=100_000)
    except HostlistError as e:
        return f"node list {expr!r}: {e}"
