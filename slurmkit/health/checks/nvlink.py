"""nvlink: inactive/down links, or error counters over `nvlink.error_threshold`, where NVLink is present.
Input: `nvidia-smi nvlink -s` (or `dcgmi nvlink -s`) and optionally `nvidia-smi nvlink -e` text."""

from __future__ import annotations

from .. import nvlink as parse
from ..base import Result
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
    for gpu, links in st.items():
        bad = [f"{n} {v}" for n, v in sorted(links.items()) if v in ("inactive", "down")]
        if bad:
            findings.append(f"GPU {gpu}: link {', '.join(bad)}")
    for gpu, counters in errs.items():
        over = {k: v for k, v in counters.items() if v > s.error_threshold}
        if over:
            findings.append(f"GPU {gpu}: " + ", ".join(f"{k}={v}" for k, v in over.items()))
    ev = {
        "links": {g: {str(n): v for n, v in ls.items()} for g, ls in st.items()},
        "errors": {g: {k: v for k, v in c.items() if v} for g, c in errs.items()},
    }
    if findings:
        ev["findings"] = findings
        return Result(NAME, s.status, "; ".join(findings), ev, code="nvlink")
    n = sum(len(v) for v in st.values())
    return Result(NAME, "ok", f"{n} NVLink links up on {len(st)} GPUs", ev)


def run(ctx) -> Result:
    status = ctx.text(NAME, "nvlink_s")
    errors = ctx.captures[NAME] if NAME in ctx.captures else ctx.text(NAME, "nvlink_e")
    return evaluate(status, errors, ctx.settings.nvlink)
