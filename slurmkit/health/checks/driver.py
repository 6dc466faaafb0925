"""driver: the driver and CUDA versions against the pinned sets in the config (empty set: any version)."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, live_unreadable
from ..context import NoData

NAME = "driver"


def evaluate(text: str, s) -> Result:
    driver = cuda = None
    if nvsmi.looks_like_csv(text):
        rows = nvsmi.parse_csv(text)
        drivers = {str(r["driver_version"]) for r in rows if r.get("driver_version")}
        driver = sorted(drivers)[0] if len(drivers) == 1 else (",".join(sorted(drivers)) or None)
    else:
        q = nvsmi.parse_q(text)
        driver, cuda = q["driver_version"], q["cuda_version"]
        if driver is None and q["errors"]:
            return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code="driver")
    if driver is None:
        raise NoData("no driver version in this input")
    ev = {
        "driver_version": driver,
        "cuda_version": cuda,
        "allowed_driver": s.driver_versions,
        "allowed_cuda": s.cuda_versions,
    }
    bad = []
    if s.driver_versions and driver not in s.driver_versions:
        bad.append(f"driver {driver} not in {', '.join(s.driver_versions)}")
    if s.cuda_versions and cuda is not None and cuda not in s.cuda_versions:
        bad.append(f"CUDA {cuda} not in {', '.join(s.cuda_versions)}")
    if bad:
        return Result(NAME, "fail", "; ".join(bad), ev, code="driver")
    return Result(NAME, "ok", f"driver {driver}" + (f", CUDA {cuda}" if cuda else ""), ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.driver)
