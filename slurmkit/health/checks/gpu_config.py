"""gpu_config: a GPU's persistence mode and application clocks as the site wants them.

Persistence mode off (no nvidia-persistenced, or `nvidia-smi -pm 0` left behind) makes the driver tear a GPU down
when its last process exits and set it up again for the next one, seconds per job start, and DCGM's deployment
check fails it. Application clocks left by someone's `nvidia-smi -ac` (a benchmark, a tuning job) make the next
job run at other clocks than the node's neighbours. Input: `nvidia-smi -q` (`Persistence Mode`, the
"Applications Clocks" and "Default Applications Clocks" sections).

`gpu_config.persistence`: enabled (the default), disabled or any. `gpu_config.app_clocks`: default (the
application clocks must be the card's defaults), or any; `app_graphics_mhz` / `app_memory_mhz` pin them instead.
What a finding counts as is `gpu_config.status` (warn by default: the GPU works)."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, is_na, live_unreadable, to_int
from ..context import NoData

NAME = "gpu_config"


def _mhz(sec, key: str) -> int | None:
    v = sec.get_ci(key) if isinstance(sec, nvsmi.Node) else None
    if not isinstance(v, str) or is_na(v):
        return None
    return to_int(v.replace("MHz", "").strip())


def read(tree) -> dict:
    """A GPU's persistence mode ("enabled"/"disabled") and application clocks, where it reads them."""
    out: dict = {}
    pm = tree.get_ci("Persistence Mode")
    if isinstance(pm, str) and pm.strip().lower() in ("enabled", "disabled"):
        out["persistence"] = pm.strip().lower()
    app, dflt = tree.get_ci("Applications Clocks"), tree.get_ci("Default Applications Clocks")
    for name, sec in (("app", app), ("default", dflt)):
        for part in ("Graphics", "Memory"):
            v = _mhz(sec, part)
            if v is not None:
                out[f"{name}_{part.lower()}_mhz"] = v
    return out


def judge(g: dict, s) -> list[str]:
    found: list[str] = []
    pm = g.get("persistence")
    if pm is not None and s.persistence != "any" and pm != s.persistence:
        found.append(f"persistence mode {pm}, the site wants it {s.persistence}")
    for part, pin in (("graphics", s.app_graphics_mhz), ("memory", s.app_memory_mhz)):
        cur, dflt = g.get(f"app_{part}_mhz"), g.get(f"default_{part}_mhz")
        if cur is None:
            continue
        if pin is not None:
            if cur != pin:
                found.append(f"application {part} clock {cur} MHz, the site pins {pin} MHz")
        elif s.app_clocks == "default" and dflt is not None and cur != dflt:
            found.append(f"application {part} clock {cur} MHz, its default is {dflt} MHz (left by `nvidia-smi -ac`?)")
    return found


def evaluate(text: str, s) -> Result:
    q = nvsmi.parse_q(text)
    if not q["gpus"] and q["errors"]:
        return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code=NAME)
    per: list[dict] = []
    findings: list[str] = []
    for i, gpu in enumerate(q["gpus"]):
        g = read(gpu["tree"])
        if not g:
            continue
        gid = nvsmi.short_bus(gpu["bus_id"]) or str(i)
        per.append({"gpu": gid, **g})
        findings += [f"GPU {gid}: {x}" for x in judge(g, s)]
    if not per:
        raise NoData(
            "no persistence mode or application clocks in this input (expected `nvidia-smi -q` with "
            "`Persistence Mode` or an Applications Clocks section)"
        )
    ev: dict = {"gpus": per}
    if findings:
        ev["findings"] = findings
        return Result(NAME, s.status, "; ".join(findings), ev, code=NAME)
    pms = sorted({g["persistence"] for g in per if "persistence" in g})
    what = f"persistence mode {'/'.join(pms)}" if pms else "application clocks as wanted"
    return Result(NAME, "ok", f"{len(per)} GPUs: {what}", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.gpu_config)
