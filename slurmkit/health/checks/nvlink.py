"""nvlink: inactive/down links, or error counters over `nvlink.error_threshold`, where NVLink is present.
Input: `nvidia-smi nvlink -s` (or `dcgmi nvlink -s`) and optionally `nvidia-smi nvlink -e` text.

Some GPUs list links that are inactive by design (an H100 PCIe lists 18 and uses those its NVLink bridges give it:
AzNHC issue 162, where such a node failed every run): `nvlink.inactive_by_design` maps a GPU model, as
`nvidia-smi nvlink -s` names it, or "*" for every GPU of the node (a node class, through `overrides:`), to the
number of inactive links each GPU may have; more than that, or any link down, is a finding."""

from __future__ import annotations

from .. import nvlink as parse
from .. import nvsmi
from ..base import Result, live_unreadable
from ..context import NoData

NAME = "nvlink"


def evaluate(status_text: str, errors_text: str, s) -> Result:
    st = parse.parse_status(status_text)
    errs = parse.parse_errors(errors_text) if errors_text else {}
    if not st:
        # no `GPU N:` line at all (an empty file, random bytes, another tool's output): nothing was read, which is
        # not "no NVLink" (a GPU without NVLink is still listed, with no links)
        raise NoData("no NVLink status in this input (expected `nvidia-smi nvlink -s` output: `GPU N: ...` lines)")
    if errors_text and errors_text.strip() and not errs:
        raise NoData("no NVLink error counters in the `nvidia-smi nvlink -e` input (no `GPU N:` lines)")
    if not any(st.values()):
        return Result(NAME, "ok", f"no NVLink on this node ({len(st)} GPUs listed, no links)", {"links": {}})
    findings = []
    models = parse.parse_models(status_text)
    by_design: dict[str, int] = {}
    for gpu, links in st.items():
        allowed = _allowed(s.inactive_by_design, models.get(gpu))
        inactive = [n for n, v in sorted(links.items()) if v == "inactive"]
        if allowed and inactive:
            by_design[gpu] = min(len(inactive), allowed)
        if len(inactive) <= allowed:
            inactive = []
        bad = [f"{n} {v}" for n, v in sorted(links.items()) if v == "down" or (v == "inactive" and n in inactive)]
        if bad:
            more = f" ({allowed} inactive by design for {models.get(gpu) or 'this node'})" if allowed else ""
            findings.append(f"GPU {gpu}: link {', '.join(bad)}{more}")
    for gpu, counters in errs.items():
        over = {k: v for k, v in counters.items() if v > s.error_threshold}
        if over:
            findings.append(f"GPU {gpu}: " + ", ".join(f"{k}={v}" for k, v in over.items()))
    ev = {
        "links": {g: {str(n): v for n, v in ls.items()} for g, ls in st.items()},
        "errors": {g: {k: v for k, v in c.items() if v} for g, c in errs.items()},
    }
    if by_design:
        ev["inactive_by_design"] = by_design
    if findings:
        ev["findings"] = findings
        return Result(NAME, s.status, "; ".join(findings), ev, code="nvlink")
    n = sum(1 for v in st.values() for x in v.values() if x != "inactive")
    extra = f", {sum(by_design.values())} inactive by design" if by_design else ""
    return Result(NAME, "ok", f"{n} NVLink links up on {len(st)} GPUs{extra}", ev)


def _allowed(table: dict[str, int], model: str | None) -> int:
    """How many inactive links a GPU of this model may have: its model's entry (case-insensitive), else "*"."""
    if model:
        for k, v in table.items():
            if k.lower() == model.lower():
                return v
    return table.get("*", 0)


def unreadable(text: str, *, counters: bool = False) -> str | None:
    """Why live `nvidia-smi nvlink -s` (or `-e`: `counters`) output cannot be read: text with no `GPU N:` line. An
    empty answer is not a finding here: the real nvidia-smi (535, on the mock NVML's L40S and T4 profiles) prints
    nothing, exit 0, for GPUs without NVLink; the -q checks catch an nvidia-smi that prints nothing at all."""
    if not text.strip() or (parse.parse_errors(text) if counters else parse.parse_status(text)):
        return None
    return f"no `GPU N:` line in {len(text)} bytes, first line {nvsmi.excerpt(text)!r}"


def run(ctx) -> Result:
    status = ctx.text(NAME, "nvlink_s")
    bad = live_unreadable(ctx, NAME, "nvidia-smi nvlink -s", unreadable(status))
    if bad is not None:
        return bad
    errors = ctx.captures[NAME] if NAME in ctx.captures else ctx.text(NAME, "nvlink_e")
    bad = live_unreadable(ctx, NAME, "nvidia-smi nvlink -e", unreadable(errors, counters=True))
    return bad if bad is not None else evaluate(status, errors, ctx.settings.nvlink)
