"""temperature: a GPU hotter than the temperature at which its hardware slows it (a failed fan, a blocked inlet, a
heatsink off its die: every synchronous job on the node runs at that GPU's pace), or than the site's limits.

`nvidia-smi -q` prints each GPU's "Temperature" section in one of two layouts. Before the Hopper drivers, absolute
degrees: `GPU Current Temp : 29 C` beside `GPU Slowdown Temp : 95 C`, `GPU Max Operating Temp : 88 C` (an A40 on
550). On H100-class GPUs with recent drivers, the headroom to the limit: `GPU T.Limit Temp : 54 C` (54 degrees
below it) beside `GPU Slowdown T.Limit Temp : -2 C` and `GPU Max Operating T.Limit Temp : 0 C` (the headroom at
which each begins). Either way: at or past the slowdown point fails, at or past the max operating point warns.
`temperature.gpu_max_c` / `memory_max_c` are the site's own absolute limits (fail above), for GPUs that print no
thresholds or memory whose limit is printed only as headroom."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, is_na, live_unreadable
from ..context import NoData

NAME = "temperature"


def _deg(v) -> float | None:
    """'33 C' -> 33.0; '-2 C' -> -2.0; N/A and friends -> None."""
    if not isinstance(v, str) or is_na(v):
        return None
    t = v.strip()
    if t.endswith("C"):
        t = t[:-1].strip()
    try:
        x = float(t)
    except ValueError:
        return None
    return x if -300 < x < 1000 else None  # a capture with 5,000 digits here is not a temperature


def read(tree) -> dict[str, float] | None:
    """A GPU's `-q` tree -> its readable temperatures and thresholds; None where it has no Temperature section."""
    sec = tree.get_ci("Temperature")
    if not isinstance(sec, nvsmi.Node):
        return None
    keys = {
        "gpu_c": "GPU Current Temp",
        "slowdown_c": "GPU Slowdown Temp",
        "max_operating_c": "GPU Max Operating Temp",
        "shutdown_c": "GPU Shutdown Temp",
        "headroom_c": "GPU T.Limit Temp",
        "slowdown_headroom_c": "GPU Slowdown T.Limit Temp",
        "max_operating_headroom_c": "GPU Max Operating T.Limit Temp",
        "memory_c": "Memory Current Temp",
        "memory_max_operating_c": "Memory Max Operating Temp",
    }
    out = {}
    for k, label in keys.items():
        d = _deg(sec.get_ci(label))
        if d is not None:
            out[k] = d
    return out


def judge(t: dict[str, float], s) -> tuple[list[str], list[str]]:
    """(fail, warn) findings of one GPU's temperatures."""
    fails: list[str] = []
    warns: list[str] = []
    g, head = t.get("gpu_c"), t.get("headroom_c")
    if g is not None and "slowdown_c" in t and g >= t["slowdown_c"]:
        fails.append(f"GPU at {g:g} C, its slowdown point is {t['slowdown_c']:g} C")
    elif g is not None and "max_operating_c" in t and g >= t["max_operating_c"]:
        warns.append(f"GPU at {g:g} C, over its max operating {t['max_operating_c']:g} C")
    if head is not None and "slowdown_headroom_c" in t and head <= t["slowdown_headroom_c"]:
        fails.append(f"GPU {head:g} C from its limit, slowdown begins at {t['slowdown_headroom_c']:g} C")
    elif head is not None and "max_operating_headroom_c" in t and head <= t["max_operating_headroom_c"]:
        warns.append(f"GPU {head:g} C from its limit, past its max operating point")
    if g is not None and s.gpu_max_c is not None and g > s.gpu_max_c:
        fails.append(f"GPU at {g:g} C, over temperature.gpu_max_c {s.gpu_max_c:g} C")
    m = t.get("memory_c")
    if m is not None and s.memory_max_c is not None and m > s.memory_max_c:
        fails.append(f"memory at {m:g} C, over temperature.memory_max_c {s.memory_max_c:g} C")
    elif m is not None and "memory_max_operating_c" in t and m >= t["memory_max_operating_c"]:
        warns.append(f"memory at {m:g} C, over its max operating {t['memory_max_operating_c']:g} C")
    return fails, warns


def evaluate(text: str, s) -> Result:
    q = nvsmi.parse_q(text)
    if not q["gpus"] and q["errors"]:
        return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code=NAME)
    per: list[dict] = []
    fails: list[str] = []
    warns: list[str] = []
    for i, g in enumerate(q["gpus"]):
        t = read(g["tree"])
        if not t or ("gpu_c" not in t and "headroom_c" not in t):
            continue  # no section, or a GPU whose temperature reads N/A (a vGPU): nothing to judge here
        gid = nvsmi.short_bus(g["bus_id"]) or str(i)
        f, w = judge(t, s)
        per.append({"gpu": gid, **t})
        fails += [f"GPU {gid}: {x}" for x in f]
        warns += [f"GPU {gid}: {x}" for x in w]
    if not per:
        raise NoData(
            "no GPU temperature in this input (expected `nvidia-smi -q` with a Temperature section reading "
            "`GPU Current Temp` or `GPU T.Limit Temp`)"
        )
    ev: dict = {"gpus": per}
    if fails or warns:
        ev["findings"] = fails + warns
    if fails:
        return Result(NAME, "fail", "; ".join(fails), ev, code=NAME)
    if warns:
        return Result(NAME, "warn", "; ".join(warns), ev, code=NAME)
    hottest = max(per, key=lambda x: x.get("gpu_c", -1e9))
    what = f"hottest {hottest['gpu_c']:g} C" if "gpu_c" in hottest else "within their limits"
    return Result(NAME, "ok", f"{len(per)} GPUs: {what}", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.temperature)
