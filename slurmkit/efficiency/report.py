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
    if len(vals) > width:            # each character: the mean of its bucket
        step = len(vals) / width
        buckets = [vals[int(i * step):max(int((i + 1) * step), int(i * step) + 1)] for i in range(width)]
        vals = [(sum(v for v in b if v is not None) / len([v for v in b if v is not None]))
                if any(v is not None for v in b) else None for b in buckets]
    return "".join("·" if v is None else BARS[min(len(BARS) - 1, max(0, int(v / 100 * len(BARS))))]
                   for v in vals)


def _f(v, unit="") -> str:
    if v is None:
        return "n/a"
    return f"{v:g}{unit}" if isinstance(v, (int, float)) else str(v)


def text(doc: dict, series: dict | None = None, *, color: bool = False) -> str:
    out = []
    head = doc.get("job")
    if head:
        out.append(f"job {head.get('job_id')} on {head.get('node')}: {head.get('gpu_hours', 0):.3g} GPU-hours "
                   f"allocated ({len(doc['gpus'])} GPU(s), {head.get('seconds', 0):.0f} s)")
    elif doc.get("source"):
        out.append(f"{doc['source']['path']} ({doc['source']['format']})")
    rows = []
    for g in doc["gpus"]:
        rows.append([g["index"], g["state"], g["samples"], _f(g["util_mean"], "%"), _f(g["util_max"], "%"),
                     _f(g["mem_used_mib_max"], " MiB"), _f(g["power_mean_w"], " W"), _f(g["power_limit_w"], " W"),
                     _f(g.get("idle_minutes")),
                     sparkline((series or {}).get(g["index"], []) or [])])
    out.append(table(rows, ["GPU", "STATE", "N", "MEAN", "MAX", "MEM MAX", "POWER", "LIMIT", "IDLE MIN",
                            "UTILISATION"]))
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
