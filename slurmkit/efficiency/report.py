"""Human text for an efficiency report: a table per GPU, a one-line sparkline of utilisation, the findings and
the next steps; the optional matplotlib plot."""

from __future__ import annotations

from ..errors import UsageError
from ..output import table

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values, width: int = 40) -> str:
    """Utilisation (0-100, None = no reading) as one line of block characters, resampled to `width`."""
    vals = list(values)
    if not vals:
        return ""
    if len(vals) > width:  # each character: the mean of its bucket
        step = len(vals) / width
        buckets = [vals[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)] for i in range(width)]
        vals = [
            (sum(v for v in b if v is not None) / len([v for v in b if v is not None]))
            if any(v is not None for v in b)
            else None
            for b in buckets
        ]
    return "".join("·" if v is None else BARS[min(len(BARS) - 1, max(0, int(v / 100 * len(BARS))))] for v in vals)


def _f(v, unit="") -> str:
    if v is None:
        return "n/a"
    return f"{v:g}{unit}" if isinstance(v, (int, float)) else str(v)


def text(doc: dict, series: dict | None = None, *, color: bool = False) -> str:
    out = []
    head = doc.get("job")
    if head:
        out.append(
            f"job {head.get('job_id')} on {head.get('node')}: {head.get('gpu_hours', 0):.3g} GPU-hours "
            f"allocated ({len(doc['gpus'])} GPU(s), {head.get('seconds', 0):.0f} s)"
        )
    elif doc.get("source"):
        out.append(f"{doc['source']['path']} ({doc['source']['format']})")
    rows = []
    prof = any(g.get("sm_active_mean") is not None for g in doc["gpus"])  # DCGM's SM / tensor activity
    for g in doc["gpus"]:
        rows.append(
            [
                g["index"],
                g["state"],
                g["samples"],
                _f(g["util_mean"], "%"),
                _f(g["util_max"], "%"),
                _f(g["mem_used_mib_max"], " MiB"),
                _f(g["power_mean_w"], " W"),
                _f(g["power_limit_w"], " W"),
                _f(g.get("idle_minutes")),
            ]
            + ([_f(g.get("sm_active_mean"), "%"), _f(g.get("tensor_active_mean"), "%")] if prof else [])
            + [sparkline((series or {}).get(g["index"], []) or [])]
        )
    out.append(
        table(
            rows,
            ["GPU", "STATE", "N", "MEAN", "MAX", "MEM MAX", "POWER", "LIMIT", "IDLE MIN"]
            + (["SM ACT", "TENSOR"] if prof else [])
            + ["UTILISATION"],
        )
    )
    p = doc.get("profiling")
    if p and p.get("state") != "ok":
        out.append(f"SM/tensor activity: {p.get('state')} ({p.get('why')})")
    if doc.get("mfu") is not None:
        m = doc["mfu"]
        out.append(f"MFU: {_f(m.get('mfu_pct'), ' %')} ({m.get('detail', '')})")
    out.append(f"verdict: {doc['verdict']}")
    for f in doc["findings"]:
        where = f" (line {f['line']})" if f.get("line") else ""
        out.append(f"  {f['severity']}: {f['text']}{where}")
    for s in doc.get("next_steps") or []:
        out.append(f"next: {s}")
    return "\n".join(out)


def plot(series: dict, path: str, *, title: str = "") -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'slurmkit[plot]'") from None
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for key, vals in series.items():
        ax.plot(range(len(vals)), [float("nan") if v is None else v for v in vals], label=f"GPU {key}")
    ax.set_ylim(-2, 102)
    ax.set_xlabel("sample")
    ax.set_ylabel("utilisation %")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


# --- `slurmkit report idle`: idle / under-used GPU-hours and their cost, from the job-efficiency log -----------


def parse_since(text: str, now: float) -> float:
    """'7d', '12h', '30m', '2w' ago, or an ISO date/time -> epoch seconds (times.parse_since, in epoch seconds)."""
    from datetime import datetime, timezone

    from ..times import parse_since as since

    return since(text, datetime.fromtimestamp(now, timezone.utc)).timestamp()


WASTE = ("idle", "hung", "underused")


def idle_report(records, *, by: str, price: float) -> dict:
    """Aggregate job records per `by` (user | account | partition | job); jobs with a wasteful verdict are findings."""
    groups: dict[str, dict] = {}
    findings = []
    for r in records:
        key = str(r.get("job_id") if by == "job" else (r.get(by) or "(none)"))
        g = groups.setdefault(
            key,
            {
                by: key,
                "jobs": 0,
                "gpu_hours": 0.0,
                "idle_gpu_hours": 0.0,
                "hung_gpu_hours": 0.0,
                "underused_gpu_hours": 0.0,
                "unknown_gpu_hours": 0.0,
            },
        )
        g["jobs"] += 1
        g["gpu_hours"] += r.get("gpu_hours") or 0.0
        for state, h in (r.get("gpu_hours_by_state") or {}).items():
            if f"{state}_gpu_hours" in g:
                g[f"{state}_gpu_hours"] += h
        if r.get("verdict") in WASTE:
            hs = r.get("gpu_hours_by_state") or {}
            findings.append(
                {
                    "job_id": r.get("job_id"),
                    "node": r.get("node"),
                    "user": r.get("user"),
                    "account": r.get("account"),
                    "partition": r.get("partition"),
                    "verdict": r.get("verdict"),
                    "gpu_hours": r.get("gpu_hours"),
                    "wasted_gpu_hours": round(sum(hs.get(s, 0.0) for s in WASTE), 6),
                    "next_steps": r.get("next_steps") or [],
                }
            )
    rows = []
    for g in groups.values():
        for k in list(g):
            if k.endswith("gpu_hours"):
                g[k] = round(g[k], 6)
        g["idle_cost"] = round((g["idle_gpu_hours"] + g["hung_gpu_hours"]) * price, 6)
        g["underused_cost"] = round(g["underused_gpu_hours"] * price, 6)
        rows.append(g)
    rows.sort(key=lambda g: -(g["idle_gpu_hours"] + g["hung_gpu_hours"] + g["underused_gpu_hours"]))
    tot = {k: round(sum(g[k] for g in rows), 6) for k in COLUMNS}
    return {"by": by, "price_per_gpu_hour": price, "groups": rows, "total": tot, "findings": findings}


COLUMNS = (
    "jobs",
    "gpu_hours",
    "idle_gpu_hours",
    "hung_gpu_hours",
    "underused_gpu_hours",
    "idle_cost",
    "underused_cost",
)


def idle_text(doc: dict) -> str:
    rows = [
        [g[doc["by"]], *[f"{g[c]:.3f}" if isinstance(g[c], float) else g[c] for c in COLUMNS]] for g in doc["groups"]
    ]
    t = doc["total"]
    rows.append(["TOTAL", *[f"{t[c]:.3f}" if isinstance(t[c], float) else t[c] for c in COLUMNS]])
    out = [
        table(
            rows,
            [
                doc["by"].upper(),
                "JOBS",
                "GPU-H",
                "IDLE GPU-H",
                "HUNG GPU-H",
                "UNDERUSED GPU-H",
                "IDLE COST",
                "UNDERUSED COST",
            ],
        )
    ]
    if not doc["price_per_gpu_hour"]:
        out.append("(audit.price_per_gpu_hour is 0: costs are not shown in money)")
    for a in doc.get("policy_actions") or []:
        out.append(
            f"idle policy: job {a['job_id']} ({a['user'] or '?'}, {a['account'] or '?'}, {a['node']}): "
            f"{a['action']} at {a['time']} - {a['reason']}"
        )
    for f in doc["findings"]:
        out.append(
            f"job {f['job_id']} ({f['user']}, {f['node']}): {f['verdict']}, "
            f"{f['wasted_gpu_hours']:.3f} of {f['gpu_hours']:.3f} GPU-hours"
            + (f" - {f['next_steps'][0]}" if f["next_steps"] else "")
        )
    return "\n".join(out)


def policy_actions(records, *, by: str) -> list[dict]:
    """The idle policy's records (check idle_policy in the health log: noticed, cancelled, requeued, exempt, a
    failed action) as the report lists them, oldest first, each with the report's group key."""
    out = []
    for r in records:
        if r.get("check") != "idle_policy":
            continue
        ev = r.get("evidence") or {}
        out.append(
            {
                "time": r.get("time"),
                "job_id": r.get("job_id"),
                "node": r.get("node"),
                "user": r.get("user"),
                "account": r.get("account"),
                "partition": r.get("partition"),
                "action": r.get("action"),
                "reason": r.get("reason"),
                "idle_seconds": ev.get("idle_seconds"),
                by: str(r.get("job_id") if by == "job" else (r.get(by) or "(none)")),
            }
        )
    out.sort(key=lambda a: str(a.get("time") or ""))
    return out


def idle_csv(doc: dict) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([doc["by"], *COLUMNS])
    for g in doc["groups"]:
        w.writerow([g[doc["by"]], *[g[c] for c in COLUMNS]])
    return buf.getvalue()
