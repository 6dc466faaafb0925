"""The heavy checks' cache (NCCL all_reduce_perf, DCGM diagnostics): a run asked for by name, or by a health
sweep job, saves its verdict per node; the prolog reads it while it is younger than the check's time-to-live,
instead of spending minutes before every job."""

from __future__ import annotations

import json
import os
import time

from ..files import atomic_write
from .base import Result


def save(path: str, res: Result) -> None:
    """Record the verdict beside the others in state_dir (temp + rename); a failure to save is noted on the
    result, never raised: the verdict stands, the prolog just will not see it."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps({"time": time.time(), "result": res.to_dict(), "code": res.code}))
        res.evidence["cached_to"] = path
    except OSError as e:
        res.evidence["cache_error"] = f"{path}: {e.strerror}"


def load(name: str, path: str, ttl_seconds: float, how_to_run: str, *, check: str | None = None) -> Result:
    """The cached verdict as a result of `check` (default: `name`, which the messages show), or a skip that says
    why there is none to trust."""
    what, name = name, check or name
    try:
        with open(path, encoding="utf-8") as f:
            cached = json.load(f)
        if not isinstance(cached, dict):
            raise ValueError("not an object")
        age = time.time() - float(cached.get("time", 0))
        r = cached.get("result", {})
        if not isinstance(r, dict):
            raise ValueError("no result")
    except (OSError, ValueError, TypeError):
        return Result(name, "skip", f"no cached {what} result (run `{how_to_run}`)", {})
    ev = dict(r.get("evidence", {}) if isinstance(r.get("evidence"), dict) else {}, cached_age_seconds=round(age))
    if age > ttl_seconds:
        return Result(name, "skip", f"cached {what} result is {age / 3600:.1f} h old (ttl {ttl_seconds:g} s)", ev)
    status = str(r["status"]) if r.get("status") in ("ok", "warn", "fail", "skip") else "skip"
    return Result(name, status, f"cached: {r.get('reason', '')}", ev, code=str(cached.get("code", "")))
