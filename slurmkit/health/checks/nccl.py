"""nccl: nccl-tests `all_reduce_perf` average bus bandwidth vs the expected value for the node's profile, plus
its failures and NCCL WARNs. Heavy: it runs only when asked for by name (`slurmkit check --only nccl`, or a
schedule that does that); the prolog reads the cached result while it is younger than `nccl.ttl_seconds`."""

from __future__ import annotations


from .. import nccl as parse
from .. import heavycache
from ..base import Result
from ..context import NoData

NAME = "nccl"

# WARNs that NCCL prints on healthy systems (topology search fallbacks): informational
_BENIGN = ("falling back to simple order",)


def expected_for(s, node: str) -> float | None:
    if s.profiles:
        from ...hostlist import contains

        for expr, v in s.profiles.items():
            if contains(expr, node):  # bounded: a pattern, never expanded past the limit
                return v
    return s.expected_busbw_gbps


def evaluate(text: str, expected: float | None, s) -> Result:
    p = parse.parse(text)
    avg = p["avg_bus_bandwidth_gbps"]
    ev = {
        k: p[k]
        for k in (
            "avg_bus_bandwidth_gbps",
            "avg_source",
            "peak_busbw_gbps",
            "rows",
            "max_size",
            "out_of_bounds",
            "wrong",
            "failures",
            "nccl_version",
            "footer",
        )
    }
    if p["unreadable"]:
        ev["unreadable"] = p["unreadable"][:10]
    ev["warnings"] = p["warnings"][:10]
    ev["expected_gbps"] = expected
    serious = [w for w in p["warnings"] if not any(b in w for b in _BENIGN)]
    if p["failures"]:
        return Result(NAME, "fail", f"all_reduce_perf failed: {p['failures'][0]}", ev, code="nccl")
    if p["unreadable"]:
        # nan, inf, 1e400: a number we cannot trust is not a bandwidth, and never a healthy one
        raise NoData(
            f"unreadable all_reduce_perf output: {p['unreadable'][0]}"
            + (f" (and {len(p['unreadable']) - 1} more)" if len(p["unreadable"]) > 1 else "")
        )
    if avg is None:
        if serious:
            return Result(NAME, "fail", f"NCCL WARN {serious[0][:120]}", ev, code="nccl")
        raise NoData("no all_reduce_perf results in this input")
    if p["out_of_bounds"] or p["wrong"]:
        return Result(
            NAME, "fail", f"wrong results: {p['wrong']} wrong, {p['out_of_bounds']} out of bounds", ev, code="nccl"
        )
    if expected is not None and avg < s.min_ratio * expected:
        return Result(
            NAME, "fail", f"avg bus bandwidth {avg:g} GB/s < {s.min_ratio:g} x expected {expected:g}", ev, code="nccl"
        )
    if serious:
        return Result(NAME, "warn", f"NCCL WARN {serious[0][:120]}", ev)
    note = f"avg bus bandwidth {avg:g} GB/s" + (
        f" (expected {expected:g})" if expected is not None else " (no expected value configured)"
    )
    if not p["footer"]:
        note += (
            f"; computed from {p['rows']} rows up to {p['max_size']} bytes: the capture has no "
            "`# Avg bus bandwidth` footer (truncated?)"
        )
    return Result(NAME, "ok", note, ev)


def run(ctx) -> Result:
    s = ctx.settings.nccl
    expected = expected_for(s, ctx.node)
    if not ctx.live:
        return evaluate(ctx.captures[NAME], expected, s)
    path = ctx.state_path("nccl")
    if NAME in ctx.explicit and ctx.profile not in ("prolog", "epilog"):
        try:
            text = ctx.text(NAME, "allreduce", timeout=s.timeout)
            res = evaluate(text, expected, s)
        except NoData as e:
            res = Result(NAME, "fail", f"all_reduce_perf printed no results ({e})", {}, code="nccl")
        heavycache.save(path, res)
        return res
    return heavycache.load("NCCL", path, s.ttl_seconds, "slurmkit check --only nccl", check=NAME)
