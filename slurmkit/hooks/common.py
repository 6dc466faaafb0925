"""What prolog and epilog share: run a profile of checks for the job, drain on failure, log every verdict."""

from __future__ import annotations

import os
import sys

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the hooks' import path stays light
    from ..drain import Action
    from ..health.base import Report
    from ..settings import Settings


_BOOT = (
    f"import sys, runpy\nm = sys.argv.pop(1)\nsys.path[:] = sys.argv.pop(1).split({os.pathsep!r})\n"
    "runpy.run_module(m, run_name='__main__', alter_sys=True)"
)


def module_argv(module: str) -> list[str]:
    """argv that runs `python -I -m module` the way this hook runs: without `site` (and its .pth files' CPU) on this
    process's sys.path when the hook script started it so (prolog/prolog's boot), else plainly. The module name
    stays one argv word (the epilog finds its sampler by it)."""
    if "site" in sys.modules or any(os.pathsep in p for p in sys.path):
        return [sys.executable, "-I", "-m", module]
    return [sys.executable, "-I", "-S", "-c", _BOOT, module, os.pathsep.join(sys.path)]


def job_id(environ) -> int | None:
    v = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    return int(v) if v and v.isdigit() else None


def job_nodelist(environ) -> str | None:
    """The job's nodes as a Slurm hostlist: slurmd's prolog and epilog get SLURM_NODELIST (22.05 sets no
    SLURM_JOB_NODELIST there, as a dump of a real epilog's environment on the dev cluster showed), a job's own
    processes SLURM_JOB_NODELIST."""
    return environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or None


def job_gpus(environ, *, unknown_is_all: bool = False) -> list[int] | None:
    """The GPUs the job gets on this node: SLURM_JOB_GPUS (gres indices = device minor numbers), else
    CUDA_VISIBLE_DEVICES (the same in a prolog: no cgroup renumbering yet). A job without GPUs gets [] - never
    "all GPUs": a CPU job must not be refused over another job's processes on GPUs it does not use. The epilog
    passes `unknown_is_all`: with neither variable (the job record lost) it cannot tell a CPU job from a GPU job
    whose GPUs it does not know, so None (all of the node's GPUs; gpu_procs then warns, never passes over none)."""
    from ..health.runner import parse_gpu_list

    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if environ.get(var, "").strip():
            return parse_gpu_list(environ[var]) or []
    return None if unknown_is_all else []


def _pending_result(pending: dict, settings):
    """A drain an earlier hook could not make: a failure of this run too, until the drain is in place."""
    from .. import drain
    from ..health.base import Result

    tag = drain.tag_of_reason(pending.get("reason"), settings) or "pending"
    who = (
        " ".join(str(x) for x in (pending.get("context"), pending.get("job_id") and f"job {pending['job_id']}") if x)
        or "an earlier hook"
    )
    detail = pending["reason"][len(settings.drain.prefix) + len(tag) :].strip()
    return Result(
        pending.get("check") or "pending",
        "fail",
        f"{detail} (pending drain from {who})",
        {"pending_drain": pending},
        code=tag,
    )


def _act(profile, settings, node, jid, report) -> Action:
    """Drain on the first failure (an earlier pending drain first: the first reason stays), retried and else
    recorded as pending; then commit the deferred state (the Xid mark) of every verdict that was acted on."""
    from .. import drain

    failed = report.failures[0] if report.failures else None
    action = drain.Action("none")
    if failed is not None:
        if settings.health.drain:
            pending = failed.evidence.get("pending_drain") if isinstance(failed.evidence, dict) else None
            reason = drain.reason_for_result(settings, failed) if pending is None else pending["reason"]
            action = drain.drain_for_hook(
                settings,
                node,
                reason,
                check=failed.check,
                context=profile,
                job_id=jid,
                replace_hook_error=pending is not None,
            )
        else:
            action = drain.Action("not-drained (health.drain is false)")
    for r in report.results:
        if r.commit is not None and (r.status != "fail" or drain.acted(action)):
            r.commit()
    return action


_UNSET = object()


def _gpu_source(report: Report, check: str) -> dict:
    """`gpu_source` for the record of a check that reads the GPUs' `-q` (NVML, or nvidia-smi and why not NVML)."""
    from ..health.checks.registry import SOURCES

    return {"gpu_source": report.gpu_source} if report.gpu_source and SOURCES.get(check) == "q" else {}


def run_hook(
    profile: str,
    settings: Settings,
    environ,
    *,
    pre_records=(),
    checks=None,
    job_gpus=_UNSET,
    budget: float | None = None,
) -> tuple[Report, Action]:
    """Run `profile` ("prolog" | "epilog" | "health"), or only `checks` of it; returns (report, action). Appends
    every verdict to the health log. `job_gpus` None = all the node's GPUs (a health run: no job)."""
    from .. import drain, healthlog
    from ..health.runner import node_name, run_checks

    node = environ.get("SLURMD_NODENAME") or node_name()
    jid = job_id(environ)
    if job_gpus is _UNSET:
        gpus = globals()["job_gpus"](environ, unknown_is_all=(profile == "epilog"))
    else:
        gpus = job_gpus
    report = run_checks(
        settings,
        profile,
        job_gpus=gpus,
        node=node,
        job_id=jid,
        job_nodelist=job_nodelist(environ),
        subset=checks,
        budget=budget,
    )
    pending = drain.read_pending(settings, node) if settings.health.drain else None
    if pending is not None:
        report.results.insert(0, _pending_result(pending, settings))
    action = _act(profile, settings, node, jid, report)
    failed = report.failures[0] if report.failures else None
    recs = list(pre_records)
    for r in report.results:
        # every verdict is logged; per-GPU detail only where it matters (warn/fail): an ok verdict keeps its
        # scalar evidence, so a busy node's log grows by a few hundred bytes a job, not kilobytes
        ev = (
            r.evidence
            if r.status in ("warn", "fail")
            else {k: v for k, v in r.evidence.items() if not isinstance(v, (list, dict))}
        )
        recs.append(
            healthlog.record(
                check=r.check,
                status=r.status,
                reason=r.reason,
                evidence=ev,
                context=profile,
                node=node,
                job_id=jid,
                action=action if r is failed else "none",
                seconds=r.seconds,
                code=r.code or None,
                profile_seconds=round(report.seconds, 3),
                **_gpu_source(report, r.check),
            )
        )
    try:
        healthlog.write(settings, recs)
    except OSError as e:
        from ..logsinks import alert

        verdict = "healthy" if report.healthy else f"unhealthy, {action}"
        alert(
            f"{profile}: node {node} job {jid if jid is not None else '-'}: cannot write the health log"
            f" {settings.paths.health_log}: {e}; {len(recs)} record(s) of this run are lost (the verdict stands:"
            f" {verdict})"
        )
    if failed is not None:
        reason = (
            failed.evidence["pending_drain"]["reason"]
            if "pending_drain" in failed.evidence
            else drain.reason_for_result(settings, failed)
        )
        print(f"slurmkit {profile}: {reason} ({action})", file=sys.stderr)
    return report, action


def load_settings(profile: str):
    from ..errors import SlurmkitError
    from ..nodesettings import load

    try:
        return load()
    except SlurmkitError as e:
        print(f"slurmkit {profile}: {e}", file=sys.stderr)
        return None


def fail_safe(profile: str, fn) -> int:
    """Run fn() -> exit code; an unexpected error exits 1 with one line on stderr (Slurm then drains with
    "<Prolog|Epilog> error": fail-closed, and visible). The cyclic garbage collector is off meanwhile: a hook lives
    well under a second and makes little cyclic garbage, and the collector's passes over the objects its imports
    create cost 4% of its CPU, on every job (the children it forks to live long turn it back on)."""
    import gc

    gc.disable()
    try:
        return fn()
    except Exception as e:  # the hook must say what broke, in one line, and never hang
        print(f"slurmkit {profile}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        if os.environ.get("SLURMKIT_DEBUG"):
            raise
        return 1
