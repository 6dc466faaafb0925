from __future__ import annotations

import sys

import click

from .ctx import Ctx, pass_ctx


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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (see README).")
@pass_ctx
def sync(ctx: Ctx, source, dest, keep, as_user, marker, series, dry_run, as_json):
    """Copy the complete checkpoints of SOURCE to DEST (a path or s3://bucket/prefix): atomic, verified,
    unchanged ones skipped, the newest --keep kept."""
    import os

    from ..checkpoint import sync as cs
    from ..errors import SlurmkitError, UsageError

    cfg = ctx.settings.sync
    try:
        source = cs.validate_location(os.path.abspath(source) if "://" not in source else source, "SOURCE")
        dest = cs.validate_location(os.path.abspath(dest) if "://" not in dest else dest, "DEST")
    except cs.SyncError as e:
        raise UsageError(str(e)) from None
    if source.startswith("s3://"):
        raise UsageError("SOURCE must be a local directory")
    try:
        cs.check_disjoint(source, dest)
    except cs.SyncError as e:
        raise UsageError(str(e)) from None
    identity = None
    if as_user:
        import pwd

        try:
            pw = pwd.getpwnam(as_user)
        except KeyError:
            raise UsageError(f"--user: no such user {as_user!r}") from None
        identity = (pw.pw_uid, pw.pw_gid, pw.pw_name)
    elif os.geteuid() == 0:
        owner = cs.foreign_owner(dest, 0)
        if owner is not None:
            raise UsageError(
                f"DEST {dest} belongs to uid {owner}: as root, sync as that user with --user "
                "(a root sync never writes where another user can plant links)"
            )
    bar = None
    progress = on_total = None
    if not as_json and not dry_run and identity is None and sys.stderr.isatty():
        import threading

        state = {}
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

        bar = state
    try:
        rep = cs.run_as(
            identity,
            cs.sync_dir,
            source,
            dest,
            keep=keep or cfg.keep,
            marker=marker or cfg.marker,
            algo=cfg.algo,
            workers=cfg.workers,
            dry_run=dry_run,
            progress=progress,
            on_total=on_total,
            settings=cfg,
            series=series,
            before=lambda: cs.preload(dest, cfg),
        )
    except cs.SyncError as e:
        raise SlurmkitError(str(e)) from None
    finally:
        if bar and "bar" in bar:
            bar["bar"].__exit__(None, None, None)
    if as_json:
        from ..output import emit_json

        emit_json(rep.as_dict())
    else:
        if dry_run:
            click.echo(f"would copy: {', '.join(rep.get('copy', [])) or '-'} ({rep.get('would_copy_bytes', 0)} bytes)")
            click.echo(f"would prune: {', '.join(rep.get('prune', [])) or '-'}")
            click.echo(f"unchanged: {', '.join(rep['skipped']) or '-'}")
        else:
            mib = rep["bytes"] / 2**20
            click.echo(
                f"copied {len(rep['copied'])} ({mib:.1f} MiB in {rep['seconds']:.2f}s), "
                f"unchanged {len(rep['skipped'])}, pruned {len(rep['pruned'])}"
                + (f", incomplete at source (not copied): {', '.join(rep['incomplete'])}" if rep["incomplete"] else "")
            )
        for w in rep.get("refused", []):
            click.echo(f"slurmkit: refused symlink {w}", err=True)
        for err in rep["errors"]:
            click.echo(f"slurmkit: error: {err}", err=True)
    return 1 if rep["errors"] or rep.get("deferred") else 0
