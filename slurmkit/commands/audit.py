"""`slurmkit audit`: every out-of-service node, why, since when, by whom, with evidence and a next step;
`slurmkit audit resume`: resume only what slurmkit drained, once its check passes again. The work is in
slurmkit/audit (gather.py, resume.py, text.py): these commands parse, call it, print."""

from __future__ import annotations

import sys

import click

from .ctx import Ctx, echo
from ..errors import UsageError


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
    if as_json and as_csv:
        raise UsageError("--json and --csv: choose one")
    from .. import audit as A
    from ..audit.gather import run_audit
    from ..times import utc_iso

    ctx = cctx.obj
    source, now, entries, _ = run_audit(ctx, from_file, since, partition, now_text)
    summary = A.summarize(entries, price_per_gpu_hour=ctx.settings.audit.price_per_gpu_hour)
    if as_json:
        from ..output import emit_json

        emit_json(
            {
                "source": source,
                "now": utc_iso(now.timestamp()),
                "nodes": [e.to_dict() for e in entries],
                "summary": summary,
            }
        )
    elif as_csv:
        import csv

        from ..output import printable

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(A.CSV_FIELDS)
        w.writerows([[printable(c) if isinstance(c, str) else c for c in row] for row in A.csv_rows(entries)])
    else:
        from ..audit.text import print_human

        print_human(entries, summary, source, echo)
    return 1 if entries else 0


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
    from ..audit.resume import resume_nodes
    from ..slurm import fold_hostlist

    decisions, failed = resume_nodes(ctx, nodelist, recheck=recheck, force=force, dry_run=dry_run)
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
