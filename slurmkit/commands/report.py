"""`slurmkit report idle`: idle, hung and under-used GPU-hours and their cost, by user, account or partition."""

from __future__ import annotations

import time

import click

from .ctx import Ctx, pass_ctx
from ..errors import UsageError


@click.group("report")
def report():
    """Reports over slurmkit's logs."""


@report.command("idle")
@click.option("--since", default="7d", show_default=True, help="7d, 12h, 30m, 2w, or a date (2026-11-24).")
@click.option("--by", type=click.Choice(["user", "account", "partition", "job"]), default="user", show_default=True)
@click.option("--log", "log", default=None, metavar="FILE", help="The job-efficiency log (default: from the config).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--csv", "as_csv", is_flag=True, help="One CSV row per group.")
@click.option(
    "--run-command",
    is_flag=True,
    help="Run efficiency.idle_command once per finding (nothing is run or sent without this flag).",
)
@click.option("--dry-run", is_flag=True, help="With --run-command: print the commands, run nothing.")
@pass_ctx
def idle(ctx: Ctx, since, by, log, as_json, as_csv, run_command, dry_run):
    """Idle and under-used GPU-hours from the job-efficiency log, priced at audit.price_per_gpu_hour."""
    import os

    from ..efficiency import record
    from ..efficiency.report import idle_csv, idle_report, idle_text, parse_since
    from ..times import utc_iso
    from ..output import emit_json

    if as_json and as_csv:
        raise UsageError("--json and --csv: choose one")
    s = ctx.settings
    path = log or record.log_path(s)
    if not os.path.exists(path) and not os.path.exists(path + ".1"):
        raise UsageError(
            f"no job-efficiency log at {path} (the epilog writes it; is efficiency.enabled on the "
            "nodes, and is this the shared log?)",
            path=path,
        )
    t0 = parse_since(since, time.time())
    doc = idle_report(record.read(path, since=t0), by=by, price=s.audit.price_per_gpu_hour)
    doc["since"] = utc_iso(t0)
    doc["log"] = path
    doc["policy_actions"] = acts = _policy_actions(s, utc_iso(t0), by)
    for g in doc["groups"]:  # per group: what the idle policy did to its jobs (cancelled: 1, noticed: 2, ...)
        g["policy"] = {}
        for a in acts:
            if a[by] == g[by]:
                g["policy"][a["action"]] = g["policy"].get(a["action"], 0) + 1
    if run_command:
        doc["commands"] = _run_per_finding(ctx, doc["findings"], dry_run)
    if as_json:
        emit_json(doc)
    elif as_csv:
        click.echo(idle_csv(doc), nl=False)
    else:
        click.echo(idle_text(doc))
    return 0


def _policy_actions(settings, since: str, by: str) -> list[dict]:
    """What the idle policy did since then, from the health log (none where it was never turned on)."""
    from .. import healthlog
    from ..efficiency.report import policy_actions

    return policy_actions(healthlog.read(settings.paths.health_log, since=since), by=by)


def _run_per_finding(ctx: Ctx, findings: list[dict], dry_run: bool) -> list[dict]:
    import shlex

    from .. import proc
    from ..errors import CommandError

    eff = ctx.settings.efficiency
    if not eff.idle_command:
        raise UsageError("--run-command: efficiency.idle_command is empty in the config")
    out = []
    for f in findings:
        fill = {k: "" if v is None else str(v) for k, v in f.items() if not isinstance(v, list)}
        argv = [a.format(**fill) for a in eff.idle_command]  # each placeholder stays one argument
        r = {"job_id": f["job_id"], "argv": argv}
        if dry_run:
            click.echo("would run: " + " ".join(shlex.quote(a) for a in argv), err=True)
        else:
            try:
                res = proc.run(argv, timeout=eff.idle_command_timeout, check=False)
                r["returncode"] = res.returncode
            except CommandError as e:
                r["error"] = str(e)
        out.append(r)
    return out
