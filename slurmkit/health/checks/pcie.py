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
# the kernel's "pci BDF: ... limited by 8.0 GT/s PCIe x8 link at BDF (capable of ... with 16.0 GT/s PCIe x16 link)",
# in two anchored pieces around the last "limited by " (one `pci X: .*limited by` search per line cost O(n) at
# each "pci " of a hostile line); speeds are decimals and widths 1-3 digits, so float() and int() never raise
_PCI = re.compile(r"pci (?P<bdf>[0-9a-fA-F:.]+): ")
_GTS = r"[0-9]{1,3}(?:\.[0-9]{1,6})?"
_TAIL = re.compile(
    rf"limited by (?P<gt>{_GTS}) GT/s PCIe x(?P<w>[0-9]{{1,3}}) link at (?P<at>[0-9a-fA-F:.]+) "
    rf"\(capable of [^()]*? with (?P<cgt>{_GTS}) GT/s PCIe x(?P<cw>[0-9]{{1,3}}) link\)"
)


def _limited(line: str) -> dict | None:
    i = line.rfind("limited by ")
    if i < 0:
        return None
    head, tail = _PCI.search(line, 0, i), _TAIL.match(line, i)
    return {**head.groupdict(), **tail.groupdict()} if head and tail else None


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
    lim = [m for m in (_limited(ln) for ln in text.splitlines() if "limited by " in ln) if m]
    if lim:
        for m in lim:
            per.append(
                {
                    "gpu": m["bdf"],
                    "gts": float(m["gt"]),
                    "width": int(m["w"]),
                    "capable_gts": float(m["cgt"]),
                    "capable_width": int(m["cw"]),
                    "limited_at": m["at"],
                }
            )
            if float(m["gt"]) < float(m["cgt"]) or int(m["w"]) < int(m["cw"]):
                findings.append(
                    f"{m['bdf']}: {m['gt']} GT/s x{m['w']} (capable of "
                    f"{m['cgt']} GT/s x{m['cw']}), limited at {m['at']}"
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
