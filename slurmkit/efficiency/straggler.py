"""Stragglers: in a job on several nodes, the node whose GPUs lag the others (one slow node sets the pace of every
synchronous step). Pure: over the job's per-node efficiency records (record.build), no I/O.

A node lags when the median over its GPUs of one measure is below the median of the OTHER nodes' values by more
than `margin_pct` percent of theirs:
  sm_clock    the SM clock (MHz): a GPU the hardware slows (HW Slowdown, Power Brake) runs at a fraction of it
  activity    DCGM's SM activity when every node has it, else utilisation
  power       the power draw (W): a GPU that waits draws less
Its likely cause: the clock event reasons its GPUs had active (HW Power Brake Slowdown in 100 % of samples on
GPUs 0-7), else the measure that lags. Standard library only (the epilog may use it).
"""

from __future__ import annotations

from ..health.checks.clocks import REASONS
from .verdict import median

MEASURES = (
    ("sm_clock", "sm_clock_median_mhz", "SM clock", " MHz"),
    ("activity", None, "", " %"),  # sm_active_mean when every node has it, else util_median
    ("power", "power_median_w", "power", " W"),
)


def _node_value(gpus: list[dict], key: str) -> float | None:
    return median([g.get(key) for g in gpus])


def _activity_key(records: dict[str, dict]) -> tuple[str, str]:
    every = all(any(g.get("sm_active_mean") is not None for g in r.get("gpus") or []) for r in records.values())
    return ("sm_active_mean", "SM activity") if every else ("util_median", "utilisation")


def _cause(gpus: list[dict]) -> str | None:
    """The clock event reasons this node's GPUs had active, most common first: 'HW Power Brake Slowdown on GPUs
    0-7 (100 % of samples)'; None when none was."""
    seen: dict[str, list[tuple[object, float]]] = {}
    for g in gpus:
        for name, share in (g.get("clock_reasons") or {}).items():
            if name in REASONS and name != "gpu_idle" and share > 0:  # Idle says nothing about lag
                seen.setdefault(name, []).append((g.get("index"), share))
    if not seen:
        return None
    parts = []
    for name, on in sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        share = max(s for _, s in on)
        parts.append(f"{REASONS[name][0]} on GPU {_indexes([i for i, _ in on])} ({share * 100:.0f} % of samples)")
    return "; ".join(parts)


def _indexes(ix: list) -> str:
    nums = sorted(i for i in ix if isinstance(i, int))
    if len(nums) != len(ix) or not nums:
        return ",".join(str(i) for i in ix)
    runs, start, prev = [], nums[0], nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(runs)


def find(records: dict[str, dict], margin_pct: float) -> list[dict]:
    """{node: its record of the job} -> the nodes that lag, each {"node", "lags": [{"measure", "value", "peers",
    "unit"}], "cause", "text"}; [] for a job on one node, or when no node lags."""
    if len(records) < 2:
        return []
    act_key, act_label = _activity_key(records)
    values: dict[str, dict[str, float | None]] = {}
    for node, r in records.items():
        gpus = r.get("gpus") or []
        values[node] = {name: _node_value(gpus, key or act_key) for name, key, _label, _unit in MEASURES}
    out = []
    for node, r in records.items():
        lags = []
        for name, _key, label, unit in MEASURES:
            mine = values[node][name]
            peers = median([v[name] for n, v in values.items() if n != node])
            if mine is None or peers is None or peers <= 0:
                continue
            if mine < peers * (1 - margin_pct / 100.0):
                lags.append({"measure": label or act_label, "value": mine, "peers": peers, "unit": unit})
        if not lags:
            continue
        entry = {"node": node, "lags": lags, "cause": _cause(r.get("gpus") or [])}
        out.append({**entry, "text": f"straggler {node}: {describe(entry)}"})
    return out


def describe(x: dict) -> str:
    """What a straggler entry says after the node: 'SM clock 382 MHz vs 1980 MHz on the job's other nodes; likely
    cause: ...'."""
    said = ", ".join(f"{m['measure']} {m['value']:g}{m['unit']} vs {m['peers']:g}{m['unit']}" for m in x["lags"])
    return f"{said} on the job's other nodes" + (f"; likely cause: {x['cause']}" if x.get("cause") else "")


# -- one node's judgement of itself (the `straggler` health check) ----------------------------------------------------
RUN_TOLERANCE = 300.0  # seconds: a peer's record of the same run started this close to this node's (a requeued run
# starts again only after the last one ended, and every node's sampler starts at its prolog)


def run_token(rec: dict) -> str:
    """`JOBID@START`: one run of a job (a requeued job runs again under its id), as the health log remembers it."""
    return f"{rec.get('job_id')}@{int(rec.get('start') or 0)}"


def same_run(recs: list[dict], mine: dict) -> dict | None:
    """Of one peer's records, the record of `mine`'s run: the same job, the start nearest `mine`'s, within
    RUN_TOLERANCE; None when that node has none (its epilog has not written it yet, or it never will)."""
    start = mine.get("start") or 0
    best = None
    for r in recs:
        if r.get("job_id") != mine.get("job_id") or not isinstance(r.get("start"), (int, float)):
            continue
        gap = abs(r["start"] - start)
        if gap <= RUN_TOLERANCE and (best is None or gap < abs(best["start"] - start)):
            best = r
    return best


def judge(mine: dict, peers: dict[str, dict], margin_pct: float) -> dict | None:
    """This node's entry of `find` over its run and its peers' records of it (every one present); None: no lag."""
    node = mine.get("node")
    if not isinstance(node, str):
        return None
    return next((x for x in find({**peers, node: mine}, margin_pct) if x["node"] == node), None)
