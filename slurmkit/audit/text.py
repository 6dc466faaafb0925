"""The audit report for a human: one table, each node's cause and evidence, the GPU-hours lost."""

from __future__ import annotations

from ..times import human_age


def print_human(entries, summary, source, echo) -> None:
    """The report as a table, each node's cause, history and evidence, then the summary, through `echo`."""
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
