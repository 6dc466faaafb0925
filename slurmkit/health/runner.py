"""Run a profile of checks on this node (or on captured text) within a time budget; build the Report.

    run_checks(settings, "prolog", job_gpus=[0, 1]) -> Report
    run_checks(settings, "full", only=["xid"], captures={"xid": text}) -> Report

A check that cannot run (its command timed out, the tool is missing, the budget ran out) is a failure when
`health.fail_closed` (the default), else a warning: a hung nvidia-smi is a real symptom of a GPU that fell off
the bus, so it must not pass. Unknown check names are a UsageError.
"""

from __future__ import annotations

import os
import time

from ..errors import CommandError, UsageError
from .base import Report, Result
from .checks import ORDER
from .context import Context, NoData

from .checks.registry import PROFILES, SOURCES as _SOURCES


def node_name() -> str:
    env = os.environ
    return (
        env.get("SLURMKIT_NODE")
        or env.get("SLURMD_NODENAME")
        or env.get("SLURMKIT_FAKE_NODE")
        or __import__("socket").gethostname().split(".")[0]
    )


def parse_gpu_list(value: str | None) -> list[int] | None:
    """SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES ("0,1,3", "0-3") -> [0, 1, 3]; unset/empty -> None."""
    if not value or not value.strip():
        return None
    out: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            if a.isdigit() and b.isdigit():
                out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out or None


def _unrunnable(name: str, why: str, settings, evidence=None) -> Result:
    st = "fail" if settings.health.fail_closed else "warn"
    return Result(name, st, why, evidence or {}, code=name if st == "fail" else "")


def _tool_exit(ctx: Context, name: str, res: Result, settings) -> Result:
    """A command the check read exited non-zero: a finding (fail when fail_closed), never a skip or an ok. A fail
    the check found itself stays, with the exit code and stderr added to its evidence. A fault met reading a
    source another way (an NVML call that hung; the check read nvidia-smi) is a finding the same way."""
    fault = ctx.fault(name)
    if fault is not None:
        why, fev = fault
        if res.status == "fail":
            res.evidence = dict(res.evidence, nvml=fev)
        else:
            st = f"{res.status}: {res.reason}" if res.reason else res.status
            res = _unrunnable(name, f"{why} (nvidia-smi read instead: {st})", settings, dict(fev, was=res.status))
    bad = ctx.failed_tool(name)
    if bad is None:
        return res
    argv, rc, err = bad
    ev = {"argv": argv, "exit_code": rc, "stderr": err}
    if res.status == "fail":
        res.evidence = dict(res.evidence, tool_exit=ev)
        return res
    last = err.splitlines()[-1] if err else "nothing on stderr"
    cmd = " ".join([os.path.basename(argv[0]), *argv[1:3]]) if argv else name
    return _unrunnable(name, f"{cmd} exited {rc}: {last}", settings, dict(ev, was=res.status, was_reason=res.reason))


def run_checks(
    settings,
    profile: str,
    *,
    only=None,
    captures=None,
    job_gpus=None,
    node=None,
    expected_gpus: int | None = None,
    job_id=None,
    job_nodelist: str | None = None,
    subset=None,
    budget: float | None = None,
) -> Report:
    """The profile's checks (or `only` those, run explicitly: heavy ones then run instead of reading their cache;
    or the profile's checks that are also in `subset`), within `budget` seconds (default health.budget_seconds)."""
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r} (expected one of {', '.join(PROFILES)})")
    captures = dict(captures or {})
    for name in list(only or []) + list(captures):
        if name not in ORDER:
            raise UsageError(f"unknown check {name!r} (expected one of {', '.join(ORDER)})")
    if only:
        names = [n for n in ORDER if n in only]
    elif captures:
        names = [n for n in ORDER if n in captures]
    else:
        wanted = settings.health.profiles.get(profile, ORDER)
        names = [n for n in ORDER if n in wanted]
    if subset is not None:
        names = [n for n in names if n in subset]
    ctx = Context(
        settings,
        profile,
        node=node or node_name(),
        job_gpus=job_gpus,
        captures=captures,
        explicit=only or (),
        job_id=job_id,
        job_nodelist=job_nodelist,
    )
    ctx.expected_gpus = expected_gpus
    start = time.monotonic()
    if not captures:
        ctx.prefetch([_SOURCES[n] for n in names if n in _SOURCES])
    report = Report(node=ctx.node, profile=profile)
    budget = settings.health.budget_seconds if budget is None else budget
    for name in names:
        t0 = time.monotonic()
        if t0 - start > budget:
            report.results.append(_unrunnable(name, f"not run: the {budget:g}s budget was spent", settings))
            continue
        # __import__, not importlib.import_module: the C import path, which `python -X importtime` sees (the hooks'
        # import allowlist, tests/unit/hooks/test_start.py, reads it; importlib's Python path is invisible to it)
        mod = __import__(f"{__package__}.checks.{name}", fromlist=["run"])
        try:
            res = mod.run(ctx)
        except NoData as e:
            if name in captures:
                err = UsageError(f"--capture {name}: {e}", line=e.line)  # the file's line, where the parser knows it
                err.check = name
                raise err from None
            res = Result(name, "skip", str(e), {})
        except CommandError as e:
            argv = " ".join([os.path.basename(e.argv[0]), *e.argv[1:3]]) if e.argv else name
            if e.timed_out:
                hint = " (hung nvidia-smi: GPU gone?)" if "nvidia-smi" in argv else ""
                why = f"{argv} timed out after {settings.health.command_timeout:g}s{hint}"
            elif e.missing:
                why = f"{argv}: not found"
            else:
                why = str(e)
            res = _unrunnable(
                name, why, settings, {"argv": e.argv, "timed_out": e.timed_out, "stderr": (e.stderr or "")[-500:]}
            )
        except OSError as e:
            res = _unrunnable(name, f"cannot run: {e}", settings)
        if ctx.live:
            res = _tool_exit(ctx, name, res, settings)
        res.seconds = round(time.monotonic() - t0, 4)
        report.results.append(res)
    report.seconds = time.monotonic() - start
    report.gpu_source = ctx.gpu_source
    return report
