"""`slurmkit efficiency JOBID | --from-file FILE`: does the job use the GPUs it holds? Verdict per GPU and per job
(busy, underused, idle, hung, unknown) with the evidence and a next step."""

from __future__ import annotations

import sys

import click

from .ctx import Ctx, pass_ctx
from ..errors import UsageError


def _thresholds(ctx: Ctx, min_samples: int | None):
    from ..efficiency.verdict import Thresholds

    eff = getattr(ctx.settings, "efficiency", None)
    th = Thresholds.from_settings(eff) if eff is not None else Thresholds()
    if min_samples is not None:
        th = Thresholds(**{**th.__dict__, "min_samples": min_samples})
    return th


@click.command("efficiency")
@click.argument("job_id", required=False)
@click.option(
    "--from-file",
    "from_file",
    metavar="FILE",
    help="A captured nvidia-smi (--query-gpu CSV, dmon, pmon, --query-compute-apps, table), dcgmi dmon, "
    "jobstats, seff or sacct -P output (a support ticket's).",
)
@click.option("--format", "fmt", default=None, help="The capture's format, when detection guesses wrong.")
@click.option(
    "--fields",
    default=None,
    metavar="LIST",
    help="The --query-gpu/--query-compute-apps list of a CSV captured without a header.",
)
@click.option(
    "--interval",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Seconds between samples of a capture without timestamps (dmon -d, -l).",
)
@click.option(
    "--power-limit",
    type=float,
    default=None,
    metavar="W",
    help="The board's power limit, for captures that do not print it (dmon, --query-gpu without power.limit).",
)
@click.option(
    "--min-samples",
    type=click.IntRange(1, 100000),
    default=None,
    help="Fewer readable samples than this: unknown (default: efficiency.min_samples for a job, 1 for a capture).",
)
@click.option("--node", default=None, help="With JOBID: the record of this node only.")
@click.option(
    "--plot",
    "plot",
    default=None,
    metavar="FILE.png",
    help="Draw per-GPU utilisation over time (needs the plot extra: pip install 'slurmkit[plot]').",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_ctx
def efficiency(ctx: Ctx, job_id, from_file, fmt, fields, interval, power_limit, min_samples, node, plot, as_json):
    """Per-job GPU efficiency: from the job-efficiency log (JOBID) or from a captured file (--from-file)."""
    from ..efficiency import report
    from ..output import emit_json

    if bool(job_id) == bool(from_file):
        raise UsageError("give a JOBID or --from-file FILE (one of them)")
    if from_file:
        from ..efficiency.parse import parse_file
        from ..efficiency.verdict import summarize

        flist = [f.strip() for f in fields.split(",")] if fields else None
        cap = parse_file(from_file, fmt=fmt, fields=flist)
        th = _thresholds(ctx, 1 if min_samples is None else min_samples)
        doc = summarize(cap, th, interval=interval, power_limit=power_limit)
        doc["source"] = {"path": from_file, "format": cap.format}
        series = {g.key: g.util for g in cap.gpus.values()}
    else:
        from ..efficiency import record as rec

        if not job_id.isdigit():
            raise UsageError(f"JOBID: expected a number, got {job_id!r}")
        doc, series = rec.report_for_job(ctx.settings, int(job_id), node=node, thresholds=_thresholds(ctx, min_samples))
    if plot:
        report.plot(series, plot, title=doc.get("source", {}).get("path") or f"job {job_id}")
    if as_json:
        emit_json(doc)
    else:
        click.echo(report.text(doc, series, color=sys.stdout.isatty()))
    return 0 if doc["verdict"] == "busy" else 1  # fail closed: idle, hung, underused and unknown are not "ok"
