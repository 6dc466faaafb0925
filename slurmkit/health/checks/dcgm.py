"""dcgm: NVIDIA DCGM's diagnostic (`dcgmi diag -r LEVEL`), graded by slurmkit/health/dcgm.py. Heavy (level 1 takes
~10 s, 2 minutes, 3 a quarter of an hour): it runs only when asked for by name (`slurmkit check --only dcgm`, or
a health sweep job); the prolog reads the cached verdict while it is younger than `dcgm.ttl_seconds`.
A failed test fails the node; a diagnostic DCGM could not run (MIG modes mixed, all tests skipped) is a warn,
never ok and never a drain. A hung dcgmi is a finding within `dcgm.timeout`."""

from __future__ import annotations

from .. import dcgm as parse
from .. import heavycache
from ..base import Result
from ..context import NoData

NAME = "dcgm"


def evaluate(text: str) -> Result:
    try:
        parsed = parse.parse_diag(text)
    except parse.DcgmParseError as e:
        raise NoData(str(e)) from None
    status, reason, ev = parse.verdict(parsed)
    return Result(NAME, status, reason, ev, code="dcgm" if status == "fail" else "")


def run(ctx) -> Result:
    s = ctx.settings.dcgm
    if not ctx.live:
        return evaluate(ctx.captures[NAME])
    path = ctx.state_path(NAME)
    if NAME in ctx.explicit and ctx.profile not in ("prolog", "epilog"):
        try:
            res = evaluate(ctx.text(NAME, "dcgm_diag", timeout=s.timeout))
        except NoData as e:
            res = Result(NAME, "fail", f"dcgmi diag printed no result ({e})", {}, code="dcgm")
        heavycache.save(path, res)
        return res
    return heavycache.load(NAME, path, s.ttl_seconds, "slurmkit check --only dcgm")
