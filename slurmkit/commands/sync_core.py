"""What `slurmkit sync` does, without click: the click command (commands/sync.py, which adds the progress bar) and
the lean entry (slurmkit/entry.py, which skips click's import) both run `sync_main`. It imports only the parts of
the checkpoint package a sync uses (not the epilog's), and as the calling user nothing is preloaded."""

from __future__ import annotations

import os
from collections.abc import Callable


def sync_main(
    ctx,
    source: str,
    dest: str,
    *,
    keep: int | None = None,
    as_user: str | None = None,
    marker: str | None = None,
    series: str | None = None,
    dry_run: bool = False,
    as_json: bool = False,
    echo: Callable[..., None],
    progress=None,
    on_total=None,
) -> int:
    """Run the sync; print its report; the exit code (1 when a checkpoint failed or was deferred)."""
    from ..checkpoint.patterns import check_disjoint, foreign_owner, validate_location
    from ..checkpoint.report import SyncError
    from ..errors import SlurmkitError, UsageError

    cfg = ctx.settings.sync
    try:
        source = validate_location(os.path.abspath(source) if "://" not in source else source, "SOURCE")
        dest = validate_location(os.path.abspath(dest) if "://" not in dest else dest, "DEST")
    except SyncError as e:
        raise UsageError(str(e)) from None
    if source.startswith("s3://"):
        raise UsageError("SOURCE must be a local directory")
    try:
        check_disjoint(source, dest)
    except SyncError as e:
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
        owner = foreign_owner(dest, 0)
        if owner is not None:
            raise UsageError(
                f"DEST {dest} belongs to uid {owner}: as root, sync as that user with --user "
                "(a root sync never writes where another user can plant links)"
            )
    from ..checkpoint.privsep import preload, run_as
    from ..checkpoint.syncdir import sync_dir

    # the child of a privilege drop needs everything imported first; as ourselves, imports happen as used
    # (an S3 destination still sets its client up front, so its errors read the same either way)
    before = None if identity is None and not dest.startswith("s3://") else (lambda: preload(dest, cfg))
    try:
        rep = run_as(
            identity,
            sync_dir,
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
            before=before,
        )
    except SyncError as e:
        raise SlurmkitError(str(e)) from None
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
