"""clocks: a GPU held below its clocks by the hardware: HW Slowdown, HW Thermal Slowdown or HW Power Brake Slowdown
active (one such GPU slows every synchronous job on the node to its pace). The reasons a GPU runs slow on purpose
are not findings: Idle, SW Power Cap (an idle A40 reads it with 0 MHz clocks), Applications Clocks Setting, Sync
Boost, Display Clock Setting. SW Thermal Slowdown is a warning by default (the driver's own limit, reached before
the hardware's). What fails and what warns is `clocks.fail_on` / `clocks.warn_on`. Input: `nvidia-smi -q` (the
"Clocks Event Reasons" section of drivers 535+, "Clocks Throttle Reasons" before; the old narrow labels too), or
`--query-gpu` CSV with `clocks_event_reasons.*` / `clocks_throttle_reasons.*` columns (named reasons, or the
`.active` bitmask alone)."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, live_unreadable
from ..context import NoData

NAME = "clocks"
# reason -> its nvidia-smi -q label and its --query-gpu name (clocks_event_reasons.<name>) and bit in `.active`
REASONS = {
    "gpu_idle": ("Idle", 0x1),
    "applications_clocks_setting": ("Applications Clocks Setting", 0x2),
    "sw_power_cap": ("SW Power Cap", 0x4),
    "hw_slowdown": ("HW Slowdown", 0x8),
    "sync_boost": ("Sync Boost", 0x10),
    "sw_thermal_slowdown": ("SW Thermal Slowdown", 0x20),
    "hw_thermal_slowdown": ("HW Thermal Slowdown", 0x40),
    "hw_power_brake_slowdown": ("HW Power Brake Slowdown", 0x80),
    "display_clock_setting": ("Display Clock Setting", 0x100),
}
_BY_LABEL = {label.lower(): name for name, (label, _) in REASONS.items()}
SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
CSV_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")


def _active(v) -> bool | None:
    """'Active' -> True, 'Not Active' -> False, anything else (N/A, [Not Supported]) -> None."""
    if not isinstance(v, str):
        return None
    t = v.strip().lower()
    return True if t == "active" else False if t == "not active" else None


def reasons_q(tree) -> dict[str, bool] | None:
    """A GPU's `-q` tree -> {reason: active} for the reasons it reads; None when it has no such section."""
    sec = next((s for s in (tree.get_ci(n) for n in SECTIONS) if isinstance(s, nvsmi.Node)), None)
    if sec is None:
        return None
    out = {}
    for path, v in sec.walk():
        name = _BY_LABEL.get(path[-1].split(" #")[0].strip().lower())
        a = _active(v)
        if name and a is not None:
            out[name] = a
    return out


def reasons_csv(row: dict) -> dict[str, bool] | None:
    """A `--query-gpu` row -> {reason: active}: the named columns, else the `.active` bitmask; None: neither."""
    out: dict[str, bool] = {}
    mask = None
    for col, v in row.items():
        c = col.lower()
        p = next((p for p in CSV_PREFIXES if c.startswith(p)), None)
        if p is None:
            continue
        name = c[len(p) :]
        if name == "active":
            try:
                mask = int(v.strip(), 16)
            except ValueError:
                mask = None  # [N/A], [Not Supported]
        elif name in REASONS and (a := _active(v)) is not None:
            out[name] = a
    if mask is not None:
        for name, (_, bit) in REASONS.items():
            out.setdefault(name, bool(mask & bit))
    return out if out or mask is not None else None


def _judge(gid: str, active: dict[str, bool], s) -> tuple[list[str], list[str]]:
    """(fail findings, warn findings) of one GPU: the active reasons the site fails or warns on, by their labels."""
    on = [n for n, a in active.items() if a]
    fails = [REASONS[n][0] for n in on if n in s.fail_on]
    warns = [REASONS[n][0] for n in on if n in s.warn_on and n not in s.fail_on]
    return [f"GPU {gid}: {', '.join(x)} active" for x in (fails,) if x], [
        f"GPU {gid}: {', '.join(x)} active" for x in (warns,) if x
    ]


def evaluate(text: str, s, columns: list[str] | None = None) -> Result:
    per: list[dict] = []
    fails: list[str] = []
    warns: list[str] = []
    if columns is not None or nvsmi.looks_like_csv(text):
        rows = [
            (row.get("pci.bus_id") or row.get("index") or str(i), reasons_csv(row))
            for i, row in enumerate(nvsmi.parse_csv(text, columns))
        ]
    else:
        q = nvsmi.parse_q(text)
        if not q["gpus"] and q["errors"]:
            return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code=NAME)
        rows = [(nvsmi.short_bus(g["bus_id"]) or str(i), reasons_q(g["tree"])) for i, g in enumerate(q["gpus"])]
    read = [(gid, r) for gid, r in rows if r]
    if not read:
        raise NoData(
            f"no clock event reasons in this input (expected `nvidia-smi -q` with a {SECTIONS[0]!r} "
            "section, or clocks_event_reasons.* columns)"
        )
    for gid, active in read:
        per.append({"gpu": gid, "active": sorted(n for n, a in active.items() if a)})
        f, w = _judge(gid, active, s)
        fails += f
        warns += w
    ev: dict = {"gpus": per}
    if fails or warns:
        ev["findings"] = fails + warns
    if fails:
        return Result(NAME, "fail", "; ".join(fails) + " (the hardware holds the clocks down)", ev, code=NAME)
    if warns:
        return Result(NAME, "warn", "; ".join(warns), ev, code=NAME)
    return Result(NAME, "ok", f"{len(per)} GPUs: no clock slowdown", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.clocks)
