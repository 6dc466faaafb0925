"""The epilog's entry point: sync_for_job resolves SOURCE and DEST for the job, runs the sync as the job's user
within the budget, hands what is left to a background sync (or says the command to finish by hand), logs it."""

from __future__ import annotations

import os
import sys
import time

from ..settings import Settings, SyncSettings
from .jobfile import read_job_file
from . import jobstate
from .jobstate import forget
from .patterns import VARIABLES, expand, job_record_needs, with_job_record
from .privsep import REAP_GRACE, job_identity, preload, run_as
from .report import SyncError, SyncReport, empty_report
from .syncdir import sync_dir


def _job_sync(
    source: str, dest: str, cfg: SyncSettings, deadline: float | None, series: str | None = None
) -> SyncReport:
    """Runs in the dropped child: read the job file, narrow, sync."""
    try:
        job = read_job_file(source, cfg.job_file) if os.path.isdir(source) else {}
    except SyncError as e:
        rep = empty_report(source, dest)
        rep.update(status="failed", errors=[f"job file: {e}"])
        return rep
    if job.get("enabled") is False:
        rep = empty_report(source, dest)
        rep["status"] = "disabled-by-job"
        return rep
    keep = min(cfg.keep, job.get("keep", cfg.keep))
    if job.get("subdir"):
        dest = dest.rstrip("/") + "/" + job["subdir"]
    return sync_dir(
        source,
        dest,
        keep=keep,
        marker=cfg.marker,
        algo=cfg.algo,
        deadline=deadline,
        workers=cfg.workers,
        settings=cfg,
        series=series,
    )


def sync_for_job(
    settings: Settings,
    environ: dict[str, str],
    *,
    budget: float | None = None,
    background: bool | None = None,
    context: str = "sync",
) -> SyncReport:
    """Sync the job's checkpoints as the epilog would: resolve source/dest from the site config and the job's
    variables, run as the job's user within the budget, hand the rest to a background sync, log the outcome.
    Never raises; returns the report (status ok | partial | failed | disabled | nothing | ...)."""
    t0 = time.monotonic()
    cfg = settings.sync
    rep = empty_report()
    if not cfg.enabled:
        rep["status"] = "disabled"
        return rep
    job_id = environ.get("SLURM_JOB_ID") or ""
    environ = _job_environ(settings, environ, background=context == "sync-background")
    try:
        source = expand(cfg.source, environ, "source")
        dest = expand(cfg.dest, environ, "dest")
        rep.update(source=source, dest=dest)
    except SyncError as e:
        rep.update(status="failed", errors=[str(e)])
        missing = job_record_needs(environ, (cfg.source, cfg.dest))
        finish = None
        if missing:
            # the job record could not be read (controller down, record gone) and the prolog left none: the
            # checkpoints stay at the source; a background sync retries the record, else say how to finish
            rep["deferred"] = ["*"]
            bg = cfg.background if background is None else background
            if bg and context == "sync":
                rep["background_pid"] = _spawn_background(settings, environ)
                finish = "background"
            else:
                finish = (
                    f"manual: once `scontrol show job {job_id}` answers, run "
                    + manual_command(cfg.source, cfg.dest, None, environ, job_id or None)
                    + f" with {', '.join(missing)} filled in"
                )
            rep["finish"] = finish
        _log(settings, rep, job_id, context, finish)
        return rep
    try:
        identity = job_identity(environ) if os.geteuid() == 0 else None
    except SyncError as e:
        if environ.get("SLURM_JOB_UID") == "0" and not os.path.lexists(source):
            # a root job (admin tests, health jobs) with nothing to sync: no record on every node, as for any
            # job without checkpoints. (Its source is a path of the job's own user, root: stat-ing it is safe.)
            rep["status"] = "nothing"
            return rep
        rep.update(status="failed", errors=[str(e)])
        _log(settings, rep, job_id, context, None)
        return rep
    budget = cfg.budget if budget is None else budget
    margin = min(2.0, budget * 0.1)
    spent = time.monotonic() - t0  # the budget counts from the start: the job record, the identity
    deadline_in = None if budget == float("inf") else max(0.0, budget - margin - spent)
    # the child stops itself at budget - margin; at budget - 2 * grace it is killed, and run_as returns a grace later
    # even when it cannot die (asleep in the kernel on a destination that does not answer): inside the budget
    grace = min(REAP_GRACE, margin / 4)
    # the job's series: retention at DEST prunes only what this job (any of its requeues) published there
    series = job_id if job_id and job_id.isdigit() else None
    rep = run_as(
        identity,
        _job_sync_rel,
        source,
        dest,
        cfg,
        deadline_in,
        series,
        timeout=None if deadline_in is None else max(grace, budget - 2 * grace - spent),
        before=lambda: preload(dest, cfg),
        grace=grace,
    )
    rep["source"], rep["dest"] = rep["source"] or source, rep["dest"] or dest
    if rep.get("hung") and cfg.drain_on_hang and context == "sync":
        rep["drain"] = _drain_on_hang(settings, environ, job_id)
    bg = cfg.background if background is None else background
    if rep.get("deferred"):
        if bg:
            rep["background_pid"] = _spawn_background(settings, environ)
            rep["finish"] = "background"
        else:
            rep["finish"] = "manual: " + manual_command(source, dest, identity, environ, series)
    if rep["status"] == "ok" and not rep["copied"] and not rep["skipped"] and not rep["incomplete"]:
        rep["status"] = "nothing"
    rep["seconds"] = round(time.monotonic() - t0, 3)
    if not rep["deferred"] and rep["status"] != "failed":
        forget(settings, job_id)  # the prolog's record of the job is not needed any more
    if rep["status"] != "nothing":  # a job without checkpoints leaves no record on every node
        _log(settings, rep, job_id, context, rep.get("finish"))
    return rep


JOB_RECORD_RETRY_SECONDS = 600.0  # a background sync waits this long for the controller to answer
JOB_RECORD_RETRY_EVERY = 15.0


def _job_environ(settings: Settings, environ: dict[str, str], *, background: bool) -> dict[str, str]:
    """environ plus the job-record variables the patterns need: from the prolog's record, else scontrol (a
    background sync retries scontrol for a while: the controller may be restarting)."""
    pats = (settings.sync.source, settings.sync.dest)
    if not job_record_needs(environ, pats):
        return environ
    environ = {**jobstate.recorded(settings, environ.get("SLURM_JOB_ID", "")), **environ}
    end = time.monotonic() + (JOB_RECORD_RETRY_SECONDS if background else 0.0)
    while True:
        environ = with_job_record(environ, pats, timeout=settings.slurm.timeout)
        if not job_record_needs(environ, pats) or time.monotonic() >= end:
            return environ
        time.sleep(JOB_RECORD_RETRY_EVERY)


def manual_command(
    source: str, dest: str, identity: tuple[int, int, str] | None, environ: dict[str, str], series: str | None = None
) -> str:
    """The command an admin pastes to finish a sync by hand: as the job's user, every word shell-quoted (a job
    name is the user's text, and it is part of DEST)."""
    import shlex

    user = identity[2] if identity else environ.get("SLURM_JOB_USER", "")
    argv = (
        ["slurmkit", "sync"]
        + (["--user", user] if user else [])
        + (["--series", series] if series else [])
        + ["--", source, dest]
    )
    return shlex.join(argv)


def _job_sync_rel(
    source: str, dest: str, cfg: SyncSettings, deadline_in: float | None, series: str | None = None
) -> SyncReport:
    deadline = None if deadline_in is None else time.monotonic() + deadline_in
    return _job_sync(source, dest, cfg, deadline, series)


def _spawn_background(settings: Settings, environ) -> int | None:
    from .. import proc

    env = {k: environ[k] for k in VARIABLES if environ.get(k)}
    env["SLURM_JOB_UID"] = environ.get("SLURM_JOB_UID", "")
    for k in (
        "SLURMKIT_CONFIG",
        "PATH",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "PYTHONPATH",
    ):
        if os.environ.get(k):
            env[k] = os.environ[k]
    if settings.source:
        env["SLURMKIT_CONFIG"] = settings.source
    log = None
    state = settings.paths.state_dir
    if state:
        try:
            os.makedirs(state, exist_ok=True)
            log = os.path.join(state, "sync-background.log")
        except OSError:
            log = None
    try:
        return proc.spawn_detached([sys.executable, "-m", "slurmkit.checkpoint.sync", "background"], env=env, log=log)
    except OSError:
        return None


def _drain_on_hang(settings: Settings, environ: dict[str, str], job_id: str) -> str:
    """sync.drain_on_hang: the site takes a node whose checkpoint destination stopped answering out of service. Off
    by default: a storage hang is not the node's fault, and every node that writes there would drain with it."""
    from .. import drain
    from .privsep import NOT_ANSWERING

    node = environ.get("SLURMD_NODENAME") or ""
    if not node:
        return "not-drained: no SLURMD_NODENAME"
    if not settings.health.drain:
        return "not-drained (health.drain is false)"
    reason = drain.reason_for(settings, "checkpoint-sync", NOT_ANSWERING)
    jid = int(job_id) if job_id.isdigit() else None
    return drain.drain_for_hook(settings, node, reason, check="checkpoint-sync", context="epilog", job_id=jid)


def _log(settings: Settings, rep: SyncReport, job_id, context: str, finish) -> None:
    from .. import healthlog

    status = {"ok": "ok", "nothing": "ok", "partial": "warn", "disabled-by-job": "skip"}.get(rep["status"], "fail")
    if rep.get("deferred"):
        action = "deferred-background" if finish == "background" else "deferred-manual"
    elif rep["copied"] or rep["pruned"]:
        action = "copied"
    else:
        action = "none"
    reason = "; ".join(rep["errors"])[:500] if rep["errors"] else ""
    if rep.get("deferred") and not reason:
        left = "the rest" if "*" in rep["deferred"] else f"{len(rep['deferred'])} checkpoint(s)"
        why = f"deferred: {rep['hung']}" if rep.get("hung") else "budget spent"
        reason = f"{why}; {left} left for {finish}"
    evidence = {
        k: rep.get(k)
        for k in (
            "source",
            "dest",
            "copied",
            "skipped",
            "pruned",
            "deferred",
            "incomplete",
            "refused",
            "bytes",
            "seconds",
            "background_pid",
            "finish",
            "killed",
            "hung",
            "child_state",
            "drain",
            "child_signal",
            "prune_reason",
            "kept_other_jobs",
        )
        if rep.get(k) not in (None, [], "")
    }
    try:
        jid = int(job_id) if job_id else None
    except ValueError:
        jid = None
    try:
        healthlog.append(
            settings.paths.health_log,
            healthlog.record(
                check="checkpoint-sync",
                status=status,
                reason=reason,
                evidence=evidence,
                context="sync",
                job_id=jid,
                action=action,
                phase=context,
            ),
        )
    except OSError:
        pass
