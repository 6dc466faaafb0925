"""`slurmkit audit`: every out-of-service node, why, since when, by whom, with evidence and a next step;
`slurmkit audit resume`: resume only what slurmkit drained, once its check passes again. The report itself is in
audit_core (click-free: slurmkit/entry.py runs it without click too)."""

from __future__ import annotations

import click

from .audit_core import _run_audit
from .ctx import Ctx, echo
from ..errors import CommandError


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format: docs/audit.md).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV, one row per node.")
@click.option("--partition", "-p", metavar="P[,P]", help="Only nodes in these partitions.")
@click.option(
    "--since",
    metavar="AGE",
    help="Only nodes out of service since at most AGE ago (7d, 12h, 30m, "
    "or a date); nodes whose reason has no time are kept.",
)
@click.option(
    "--from-file",
    metavar="FILE",
    help="Read captured `scontrol show node` (either layout), "
    "`sinfo --json` or sinfo text (`sinfo -R`, `sinfo -N -l`, ...) instead of asking Slurm; - for stdin.",
)
@click.option("--now", "now_text", metavar="TIME", help="Compute ages as of TIME (for old captures).")
@click.pass_context
def audit(cctx, as_json, as_csv, partition, since, from_file, now_text):
    """Every drained, draining, down, failing or not-responding node: why, since when, by whom (slurmkit, Slurm,
    an admin), GPUs out of service, evidence from the health log, and a suggested next step; then a summary of
    GPU-hours lost. Exit 0 when no node is out of service, 1 when some are, 2 on bad input, 3 when Slurm could not
    be asked (no answer, or one slurmkit cannot read): never 1 for that."""
    if cctx.invoked_subcommand is not None:
        return None
    from .audit_core import audit_main

    return audit_main(
        cctx.obj,
        as_json=as_json,
        as_csv=as_csv,
        partition=partition,
        since=since,
        from_file=from_file,
        now_text=now_text,
        echo=echo,
    )


def _installed(s, node: str) -> dict[str, str]:
    """What `slurmkit install` put on `node` and how it reached it, for audit.recheck_command's placeholders."""
    import os

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


@audit.command("resume")
@click.argument("nodelist")
@click.option(
    "--recheck",
    is_flag=True,
    help="Run the check that drained each node on it now (audit.recheck_command) and resume only if it passes.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Also resume nodes slurmkit did not drain (or whose check has not passed again), overriding their reason.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what would be done; change nothing (a --recheck still runs the read-only check).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON decisions.")
@click.pass_obj
def resume(ctx: Ctx, nodelist, recheck, force, dry_run, as_json):
    """Resume NODELIST (a hostlist), but only nodes slurmkit drained and only after the check that drained them
    passes again (a later ok in the health log, or --recheck now). Anything else needs --force, which says whose
    reason it overrides. Exit 0 when every node was resumed (or would be), 1 otherwise, 3 when Slurm could not be
    asked."""
    from .. import audit as A
    from .. import drain, healthlog, proc
    from ..hostlist import expand
    from ..slurm import fold_hostlist

    s = ctx.settings
    names = expand(nodelist)
    _, now, entries, health = _run_audit(ctx, None, None, None, None, limit_nodes=set(names))
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
            if not d.check:
                d = drain.ResumeDecision(name, "refuse", "cannot tell which check drained it", check=None)
            else:
                argv = A.recheck_argv(s.audit.recheck_command, name, d.check, _installed(s, name))
                ctx.say("recheck: " + " ".join(argv))
                try:
                    res = proc.run(argv, timeout=s.audit.recheck_timeout, check=False)
                    ok, why = A.recheck_verdict(res.stdout, res.returncode, d.check)
                    if not ok and res.stderr.strip():
                        why += f" (stderr: {res.stderr.strip().splitlines()[-1][:200]})"
                except CommandError as err:
                    ok, why = False, f"recheck failed to run: {err}"
                if ok:
                    d = drain.ResumeDecision(name, "resume", why, check=d.check)
                elif force:
                    d = drain.ResumeDecision(name, "resume", f"--force: {why}", check=d.check)
                else:
                    d = drain.ResumeDecision(name, "refuse", why, check=d.check)
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
        if got != "resumed":
            why = (
                got.replace("resume-failed: ", "scontrol resume failed: ", 1)
                if got.startswith("resume-failed")
                else f"{got} ({d.why})"
            )
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
    if as_json:
        from ..output import emit_json

        emit_json({"dry_run": dry_run, "decisions": [d.to_dict() for d in decisions]})
    else:
        for d in decisions:
            click.echo(f"{d.node}: {d.action}: {d.why}")
        done = [d.node for d in decisions if d.action in ("resumed",)]
        if done:
            click.echo(f"resumed {fold_hostlist(done)}")
    return 1 if failed else 0
