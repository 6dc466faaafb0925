"""The audit's inputs, gathered: node records from Slurm (or a captured file, bounded and refused with its line when
it names absurd hostlists), the health log of the out-of-service nodes only, each node's own log where the shared
one has nothing; then the report (slurmkit/audit: pure). `run_audit` is what `slurmkit audit` and `audit resume`
run, and what a script calls."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import Any

from ..context import Ctx
from ..errors import CommandError, UsageError
from ..times import parse_now, parse_since, utc_iso


def _records(ctx: Ctx, from_file: str | None):
    if not from_file:
        return "slurm", ctx.backend().nodes()
    from ..bounded import DEFAULT_LIMIT, read_text
    from ..slurm.capture import NodeCaptureError, parse_node_capture

    if from_file == "-":
        data = sys.stdin.buffer.read(DEFAULT_LIMIT + 1)
        if len(data) > DEFAULT_LIMIT:
            raise UsageError(f"standard input is over the limit of {DEFAULT_LIMIT >> 20} MiB", path="-")
        text = data.decode("utf-8", "replace")
    else:
        text = read_text(from_file, what="captured node output")
    refuse_huge_hostlists(text, from_file)
    try:
        kind, recs = parse_node_capture(text)
    except NodeCaptureError as e:
        raise UsageError(str(e), path=from_file, line=e.line) from None
    except UsageError as e:  # a bad hostlist in the capture: say where it is
        if e.path is not None:
            raise
        raise UsageError(str(e), path=from_file, line=_line_of(text, str(e))) from None
    return f"{from_file} ({kind})", recs


def refuse_huge_hostlists(text: str, path: str) -> None:
    """A 70-byte capture saying `n[1-99999999]` would make the parser build 100 million names (gigabytes)
    before anything could refuse it: read each bracketed hostlist's size off its text first (linear, no names
    made) and refuse one over the hostlist limit, with its line. Malformed ones are left for the parser to name."""
    import re

    from ..hostlist import DEFAULT_LIMIT, HostlistError, count

    total, budget = 0, 10 * DEFAULT_LIMIT  # and all of them together: many small ranges add up
    for i, line in enumerate(text.splitlines(), 1):
        if "[" not in line:
            continue
        for tok in re.findall(r"[^\s\"',=]*\[[^\]\s]*\][^\s\"',=]*", line):
            try:
                n = count(tok)
            except HostlistError:
                continue
            total += n
            if n > DEFAULT_LIMIT:
                raise UsageError(
                    f"hostlist {tok[:80]!r} stands for {n} names, over the limit of {DEFAULT_LIMIT}", path=path, line=i
                )
            if total > budget:
                raise UsageError(
                    f"the capture's hostlists stand for more than {budget} names in all (the limit)", path=path, line=i
                )


def _line_of(text: str, message: str) -> int | None:
    """The first line of `text` holding the expression a hostlist error quotes ('bad hostlist 'n[1-x]': ...')."""
    import ast
    import re

    m = re.search(r"hostlist ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", message)
    if not m:
        return None
    try:
        expr = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    for i, line in enumerate(text.splitlines(), 1):
        if expr and expr in line:
            return i
    return None


def _health(ctx: Ctx, since: datetime | None, recs=(), window: timedelta = timedelta(0)) -> dict[str, list[dict]]:
    """The health-log records of the out-of-service nodes only, each read back no further than what the audit can
    show for it: its drain time less the evidence window (or --since, whichever is later)."""
    from .. import healthlog
    from . import out_of_service, slurm_time

    def iso(t: datetime) -> str:
        return utc_iso(t.timestamp())

    bounds: dict[str, str | None] = {}
    for r in recs:
        if not out_of_service(r):
            continue
        when = slurm_time(r.reason_time)
        lower = when - window if when is not None else None
        if since is not None and (lower is None or since > lower):
            lower = since
        bounds[r.name] = iso(lower) if lower is not None else None
    try:
        return healthlog.read_bounded(ctx.settings.paths.health_log, bounds)
    except OSError as e:
        ctx.say(f"cannot read the health log {ctx.settings.paths.health_log}: {e}")
        return {}


def _fetch_node_logs(ctx: Ctx, nodes: list[str], health: dict[str, list[dict]]) -> None:
    """For slurmkit drains the shared log has nothing on: ask the node itself (audit.node_log_command)."""
    import json

    from .. import proc

    a = ctx.settings.audit
    for node in nodes:
        argv = [x.replace("{node}", node).replace("{path}", ctx.settings.paths.health_log) for x in a.node_log_command]
        try:
            res = proc.run(argv, timeout=a.node_log_timeout, check=False)
        except CommandError as e:
            ctx.say(f"{node}: cannot fetch its health log: {e}")
            continue
        recs = []
        for line in res.stdout.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("node") == node:
                recs.append(r)
        if recs:
            health[node] = recs


def run_audit(ctx: Ctx, from_file, since_text, partition, now_text, limit_nodes=None):
    """(source, now, entries, health): the audit of the cluster Slurm answers for (or of `from_file`), its nodes
    limited to `limit_nodes` when given, with the health-log records it read."""
    from .. import audit as A

    s = ctx.settings
    now = parse_now(now_text)
    since = parse_since(since_text, now) if since_text else None
    source, recs = _records(ctx, from_file)
    if limit_nodes is not None:
        recs = [r for r in recs if r.name in limit_nodes]
    table = A.load_causes(s.audit.causes_file)
    window = timedelta(minutes=s.audit.evidence_window_minutes)
    health = _health(ctx, since, recs, window)
    parts = [p for p in (partition or "").split(",") if p] or None
    kw: dict[str, Any] = dict(
        table=table,
        prefix=s.drain.prefix,
        now=now,
        since=since,
        partitions=parts,
        evidence_per_node=s.audit.evidence_per_node,
        evidence_window=timedelta(minutes=s.audit.evidence_window_minutes),
    )
    entries = A.audit(recs, health=health, **kw)
    missing = [e.node.name for e in entries if e.by == "slurmkit" and not e.evidence]
    if missing and s.audit.node_log_command and not from_file:
        _fetch_node_logs(ctx, missing, health)
        entries = A.audit(recs, health=health, **kw)
    return source, now, entries, health
