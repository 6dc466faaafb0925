"""What `slurmkit audit` does, without click: the click group (commands/audit.py, which also has `audit resume`)
and the lean entry (slurmkit/entry.py) both run `audit_main`."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from collections.abc import Callable
from typing import Any

from ..context import Ctx
from ..errors import CommandError, UsageError
from ..times import human_age, parse_now, parse_since, utc_iso


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
    _refuse_huge_hostlists(text, from_file)
    try:
        kind, recs = parse_node_capture(text)
    except NodeCaptureError as e:
        raise UsageError(str(e), path=from_file, line=e.line) from None
    except UsageError as e:  # a bad hostlist in the capture: say where it is
        if e.path is not None:
            raise
        raise UsageError(str(e), path=from_file, line=_line_of(text, str(e))) from None
    return f"{from_file} ({kind})", recs


def _refuse_huge_hostlists(text: str, path: str) -> None:
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
    from ..audit import out_of_service, slurm_time

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


def _run_audit(ctx: Ctx, from_file, since_text, partition, now_text, limit_nodes=None):
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


def audit_main(
    ctx: Ctx,
    *,
    as_json: bool = False,
    as_csv: bool = False,
    partition: str | None = None,
    since: str | None = None,
    from_file: str | None = None,
    now_text: str | None = None,
    echo: Callable[..., None],
) -> int:
    """The audit report (JSON, CSV or text); the exit code: 1 when a node is out of service (3, raised as
    errors.NoAnswer by the backend, when Slurm could not be asked)."""
    if as_json and as_csv:
        raise UsageError("--json and --csv: choose one")
    from .. import audit as A

    source, now, entries, _ = _run_audit(ctx, from_file, since, partition, now_text)
    summary = A.summarize(entries, price_per_gpu_hour=ctx.settings.audit.price_per_gpu_hour)
    if as_json:
        from ..output import emit_json

        emit_json(
            {
                "source": source,
                "now": utc_iso(now.timestamp()),
                "nodes": [e.to_dict() for e in entries],
                "summary": summary,
            }
        )
    elif as_csv:
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(A.CSV_FIELDS)
        from ..output import printable

        w.writerows([[printable(c) if isinstance(c, str) else c for c in row] for row in A.csv_rows(entries)])
    else:
        _print_human(entries, summary, source, echo)
    return 1 if entries else 0


def _print_human(entries, summary, source, echo) -> None:
    from .. import audit as A
    from ..output import printable, table

    if not entries:
        echo(f"no node out of service ({printable(source)})")
        return
    rows = []
    for e in entries:
        n = e.node
        who = e.by + (f"/{n.reason_user}" if n.reason_user and e.by in ("admin", "slurm") else "")
        rows.append(
            [
                n.name,
                A.condition(n),
                human_age(e.age_seconds),
                f"{e.gpus_out}/{n.gpus_total}",
                who,
                e.cause.id,
                n.reason or "-",
            ]
        )
    echo(table(rows, ["NODE", "CONDITION", "AGE", "GPUS OUT", "BY", "CAUSE", "REASON"]))
    echo("")
    for e in entries:
        echo(printable(f"{e.node.name}: {e.cause.title}. Next: {e.next_step}"))
        if e.history:
            h = e.history
            when = f" [{h['user'] or '?'}@{h['time']}]" if h.get("time") else ""
            echo(printable(f"    history, not the cause: {h['reason']}{when}"))
        for r in e.evidence:
            ev = r.get("evidence") or {}
            if isinstance(ev, dict) and isinstance(ev.get("line"), str):
                detail = ev["line"]  # the line the check failed on, verbatim
            elif isinstance(ev, dict):
                detail = "; ".join(f"{k}={v}" for k, v in list(ev.items())[:4])
            else:
                detail = str(ev)
            echo(
                printable(
                    f"    {r.get('time', '?')} {r.get('context', '')} {r.get('check', '')} "
                    f"{r.get('status', '')}: {r.get('reason', '')}"
                )
                + (f" [{printable(detail[:300])}]" if detail else "")
            )
    s = summary
    echo("")
    causes = ", ".join(f"{k} {v['nodes']}" for k, v in sorted(s["by_cause"].items(), key=lambda kv: -kv[1]["nodes"]))
    who = ", ".join(f"{k} {v['nodes']}" for k, v in sorted(s["by_who"].items()))
    echo(f"{s['nodes']} nodes out of service ({who}); by cause: {causes}")
    money = ""
    if "cost_so_far" in s:
        money = (
            f" = {s['cost_so_far']:,.2f} so far, {s['cost_per_day']:,.2f} per day at "
            f"{s['price_per_gpu_hour']:g} per GPU-hour"
        )
    unknown = f" ({s['nodes_of_unknown_age']} nodes of unknown age not counted)" if s["nodes_of_unknown_age"] else ""
    echo(
        f"{s['gpus_out']} GPUs out: {s['gpu_hours_lost']:,.1f} GPU-hours lost so far{unknown}, "
        f"{s['gpu_hours_per_day']:,} GPU-hours per day{money}"
    )
