"""`slurmkit sync SOURCE DEST`: the rules and the copy are slurmkit/checkpoint/manual.py; this parses, shows a
progress bar on a terminal, and prints the report."""

from __future__ import annotations

import sys

import click

from .ctx import Ctx, echo, pass_ctx


@click.command()
@click.argument("source")
@click.argument("dest")
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=None,
    help="Complete checkpoints kept at DEST (default: sync.keep from the site config).",
)
@click.option(
    "--user",
    "as_user",
    metavar="USER",
    help="As root: read SOURCE and write DEST as this user (uid, gid and groups), as the epilog does.",
)
@click.option("--marker", metavar="FILE", help="Also treat a checkpoint holding FILE as complete (other writers).")
@click.option(
    "--series",
    metavar="JOB_ID",
    help="Retention counts and prunes only the checkpoints this job "
    "series published at DEST (what the epilog does); others are kept. Default: all of DEST's.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be copied and pruned; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (format: docs/sync.md).")
@pass_ctx
def sync(ctx: Ctx, source, dest, keep, as_user, marker, series, dry_run, as_json):
    """Copy the complete checkpoints of SOURCE to DEST (a path or s3://bucket/prefix): atomic, verified,
    unchanged ones skipped, the newest --keep kept."""
    from ..checkpoint.manual import sync as run_sync

    progress = on_total = None
    state: dict = {}
    if not as_json and not dry_run and not as_user and sys.stderr.isatty():
        import threading

        lock = threading.Lock()  # the copy reports from its worker threads

        def on_total(n):
            state["bar"] = click.progressbar(
                length=max(n, 1), label="sync", file=sys.stderr, show_pos=False, show_percent=True, show_eta=True
            )
            state["bar"].__enter__()

        def progress(n):
            if "bar" in state:
                with lock:
                    state["bar"].update(n)

    try:
        rep = run_sync(
            ctx.settings,
            source,
            dest,
            keep=keep,
            as_user=as_user,
            marker=marker,
            series=series,
            dry_run=dry_run,
            progress=progress,
            on_total=on_total,
        )
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)
    if as_json:
        from ..output import emit_json

        emit_json(rep.as_dict())
    else:
        if dry_run:
            echo(f"would copy: {', '.join(rep.get('copy', [])) or '-'} ({rep.get('would_copy_bytes', 0)} bytes)")
            echo(f"would prune: {', '.join(rep.get('prune', [])) or '-'}")
            echo(f"unchanged: {', '.join(rep['skipped']) or '-'}")
        else:
            mib = rep["bytes"] / 2**20
            echo(
                f"copied {len(rep['copied'])} ({mib:.1f} MiB in {rep['seconds']:.2f}s), "
                f"unchanged {len(rep['skipped'])}, pruned {len(rep['pruned'])}"
                + (f", incomplete at source (not copied): {', '.join(rep['incomplete'])}" if rep["incomplete"] else "")
            )
        for w in rep.get("refused", []):
            echo(f"slurmkit: refused symlink {w}", err=True)
        for err in rep["errors"]:
            echo(f"slurmkit: error: {err}", err=True)
    return 1 if rep["errors"] or rep.get("deferred") else 0
