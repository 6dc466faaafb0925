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
    from .sync_core import sync_main

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
        return sync_main(
            ctx,
            source,
            dest,
            keep=keep,
            as_user=as_user,
            marker=marker,
            series=series,
            dry_run=dry_run,
            as_json=as_json,
            echo=echo,
            progress=progress,
            on_total=on_total,
        )
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)
