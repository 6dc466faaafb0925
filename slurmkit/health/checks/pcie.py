"""pcie: a link trained below what it can do. Idle GPUs drop the link *generation* to save power (current Gen1 of
max Gen4 is normal, see the L40S and RTX 4090 fixtures), so the generation is judged on its max (the card's max vs
the host's, or `pcie.min_gen`), never on the current value; the *width* does not drop at idle, so a current width
below its max (or below `pcie.min_width`) is real down-training. Input: `nvidia-smi -q`, `--query-gpu` CSV with
pcie.link.* columns, or the kernel's "limited by ... (capable of ...)" lines."""

from __future__ import annotations

import re

from .. import nvsmi
from ..base import Result, live_unreadable, to_int
from ..context import NoData

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

NAME = "pcie"
_LIMITED = re.compile(
    r"pci (?P<bdf>[0-9a-fA-F:.]+): .*limited by (?P<gt>[0-9.]+) GT/s PCIe x(?P<w>\d+) link at "
    r"(?P<at>[0-9a-fA-F:.]+) \(capable of .*? with (?P<cgt>[0-9.]+) GT/s PCIe x(?P<cw>\d+) link\)"
)


# the link figures _judge reads (CSV query names; the -q path fills the same keys)
_FIELDS = ("gen.current", "gen.max", "gen.gpumax", "gen.hostmax", "width.current", "width.max")


def _judge(gid, vals: dict, s) -> list[str]:
    gen_cur, gen_max, gen_dev, gen_host, w_cur, w_max = (vals[k] for k in _FIELDS)
    f = []
    if w_cur is not None and w_max is not None:
        floor = s.min_width if s.min_width is not None else w_max
        if w_cur < floor:
            f.append(f"GPU {gid}: link width x{w_cur} (max x{w_max})")
    if s.min_gen is not None and gen_max is not None and gen_max < s.min_gen:
        f.append(f"GPU {gid}: link max Gen{gen_max} below Gen{s.min_gen}")
    if gen_dev is not None and gen_max is not None and gen_max < gen_dev and s.min_gen is None:
        f.append(f"GPU {gid}: link limited to Gen{gen_max} (card Gen{gen_dev}, host Gen{gen_host})")
    return f


def evaluate(text: str, s) -> Result:
    per: list[dict] = []
    findings: list[str] = []
    lim = [m for m in (_LIMITED.search(ln) for ln in text.splitlines()) if m]
    if lim:
        for m in lim:
            per.append(
                {
                    "gpu": m.group("bdf"),
                    "gts": float(m.group("gt")),
                    "width": int(m.group("w")),
                    "capable_gts": float(m.group("cgt")),
                    "capable_width": int(m.group("cw")),
                    "limited_at": m.group("at"),
                }
            )
            if float(m.group("gt")) < float(m.group("cgt")) or int(m.group("w")) < int(m.group("cw")):
                findings.append(
                    f"{m.group('bdf')}: {m.group('gt')} GT/s x{m.group('w')} (capable of "
                    f"{m.group('cgt')} GT/s x{m.group('cw')}), limited at {m.group('at')}"
                )
    elif nvsmi.looks_like_csv(text):
        rows = nvsmi.parse_csv(text)
        if not rows or not any(c.startswith("pcie.link.") for c in rows[0]):
            raise NoData("no pcie.link.* columns in this CSV")
        for i, r in enumerate(rows):
            gid = r.get("pci.bus_id") or r.get("index") or str(i)
            vals = {k: to_int(r.get(f"pcie.link.{k}")) for k in _FIELDS}
            per.append({"gpu": gid, **vals})
            findings += _judge(gid, vals, s)
    else:
        q = nvsmi.parse_q(text)
        for g in q["gpus"]:
            t = g["tree"]
            li = t.get_ci("PCI", "GPU Link Info")
            if not isinstance(li, nvsmi.Node):
                continue
            gid = nvsmi.short_bus(g["bus_id"]) or "?"
            gen = li.get_ci("PCIe Generation")
            wid = li.get_ci("Link Width")

            def g_(k, gen=gen):
                return to_int(gen.get_ci(k)) if isinstance(gen, nvsmi.Node) else None

            def w_(k, wid=wid):
                return to_int(wid.get_ci(k)) if isinstance(wid, nvsmi.Node) else None

            vals = {
                "gen.current": g_("Current"),
                "gen.max": g_("Max"),
                "gen.gpumax": g_("Device Max"),
                "gen.hostmax": g_("Host Max"),
                "width.current": w_("Current"),
                "width.max": w_("Max"),
            }
            per.append({"gpu": gid, **vals})
            findings += _judge(gid, vals, s)
        if not per:
            if q["errors"]:
                return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code="pcie")
            raise NoData("no PCIe link info in this input")
    # a GPU whose link width reads N/A (or nothing) was not judged: never counted as a good link
    blind = [p["gpu"] for p in per if p.get("width.current", p.get("width")) is None]
    if blind and len(blind) == len(per) and not findings:
        raise NoData(f"no readable PCIe link width in this input (N/A for {', '.join(map(str, blind[:8]))})")
    ev: dict[str, Any] = {"gpus": per}
    if findings:
        ev["findings"] = findings
        return Result(NAME, s.status, "; ".join(findings), ev, code="pcie")
    if blind:
        ev["unreadable"] = blind
        return Result(
            NAME,
            "warn",
            f"link width unreadable (N/A) for GPU {', '.join(map(str, blind[:8]))}; "
            f"{len(per) - len(blind)} other link(s) at their max width",
            ev,
        )
    n = len(per)
    return Result(NAME, "ok", f"{n} GPU link{'s' if n != 1 else ''} at {'their' if n != 1 else 'its'} max width", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.pcie)
