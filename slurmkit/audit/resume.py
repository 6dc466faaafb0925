"""`audit resume`: resume only what slurmkit drained, and only once the check that drained it passes again (a later
ok in the health log, or a recheck run on the node now); anything else only with `force`, which says whose reason
it overrides. Each resume goes through the drain etiquette (slurmkit/drain.py) and is written to the health log."""

from __future__ import annotations

import os

from ..context import Ctx
from ..errors import CommandError


def installed(s, node: str) -> dict[str, str]:
    """What `slurmkit install` put on `node` and how it reached it, for audit.recheck_command's placeholders."""
    from ..install.layout import layout

    lay = layout(s.install, node)

    def existing(p: str) -> str:  # ssh -F with a missing file fails; no file = no config, as install reads it
        p = os.path.expanduser(p)
        return p if os.path.exists(p) else "/dev/null"

    return {
        "slurmkit": lay.slurmkit,
        "config": lay.config,
        "ssh_config": existing(s.install.ssh_config),
        "known_hosts": os.path.expanduser(s.install.known_hosts),
    }


def _recheck(ctx: Ctx, d, name: str, force: bool):
    """Run the check that drained `name` on it now: the decision that follows (resume, or refuse with why)."""
    from .. import audit as A
    from .. import drain, proc

    s = ctx.settings
    if not d.check:
        return drain.ResumeDecision(name, "refuse", "cannot tell which check drained it", check=None)
    argv = A.recheck_argv(s.audit.recheck_command, name, d.check, installed(s, name))
    ctx.say("recheck: " + " ".join(argv))
    try:
        res = proc.run(argv, timeout=s.audit.recheck_timeout, check=False)
        ok, why = A.recheck_verdict(res.stdout, res.returncode, d.check)
        if not ok and res.stderr.strip():
            why += f" (stderr: {res.stderr.strip().splitlines()[-1][:200]})"
    except CommandError as err:
        ok, why = False, f"recheck failed to run: {err}"
    if ok:
        return drain.ResumeDecision(name, "resume", why, check=d.check)
    if force:
        return drain.ResumeDecision(name, "resume", f"--force: {why}", check=d.check)
    return drain.ResumeDecision(name, "refuse", why, check=d.check)


def resume_nodes(ctx: Ctx, nodelist: str, *, recheck: bool, force: bool, dry_run: bool):
    """(decisions, failed) for every node of `nodelist` (a hostlist): each ResumeDecision's action is resumed,
    would-resume (dry_run), refuse, skip or failed, with why; failed when a node was refused, failed or unknown."""
    from .. import audit as A
    from .. import drain, healthlog
    from ..hostlist import expand
    from .gather import run_audit

    s = ctx.settings
    names = expand(nodelist)
    _, _, entries, health = run_audit(ctx, None, None, None, None, limit_nodes=set(names))
    by_name = {e.node.name: e for e in entries}
    known = {r.name for r in ctx.backend().nodes(nodelist)} if len(by_name) < len(names) else set(names)
    decisions = []
    for name in names:
        e = by_name.get(name)
        if e is None and name not in known:
            decisions.append(drain.ResumeDecision(name, "skip", "no such node"))
            continue
        passed = e is not None and A.passed_since(health.get(name, []), e.check, A.slurm_time(e.node.reason_time))
        d = drain.plan_resume(e, name, force=force, recheck=recheck, passed_since_drain=passed)
        if d.action == "recheck":
            d = _recheck(ctx, d, name, force)
        decisions.append(d)
    failed = False
    for d in decisions:
        if d.action != "resume":
            failed = failed or d.action == "refuse" or (d.action == "skip" and d.why == "no such node")
            continue
        if dry_run:
            d.action = "would-resume"
            continue
        # the etiquette's resume: re-reads the node, so a reason changed since the plan is not overridden unasked
        got = drain.resume_node(s, d.node, backend=ctx.backend(), force=d.overrides is not None or force)
        if got.kind != "resumed":
            why = f"scontrol resume failed: {got.detail}" if got.kind == "resume-failed" else f"{got} ({d.why})"
            d.action, d.why, failed = "failed", why, True
            continue
        d.action = "resumed"
        e = by_name.get(d.node)
        try:
            healthlog.write(
                s,
                healthlog.record(
                    check=d.check or "audit",
                    status="ok" if d.overrides is None else "skip",
                    context="audit",
                    node=d.node,
                    reason=e.node.reason if e else "",
                    action="resumed",
                    evidence={"why": d.why, "overrides": d.overrides},
                ),
            )
        except OSError as err:
            ctx.say(f"cannot append to the health log: {err}")
    return decisions, failed
