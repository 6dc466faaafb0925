"""The sync a person or a script asks for (`slurmkit sync`, or Python): the rules a sync outside the epilog keeps
before it copies anything. SOURCE a local directory, DEST a path or s3://; the two never overlap; as root, only as a
named user (--user) or into a DEST root owns (a root sync never writes where another user can plant links); as
another user, everything is imported before the privilege drop. Then syncdir.sync_dir copies, verifies, publishes.
Standard library only, as the rest of the checkpoint package."""

from __future__ import annotations

import os
from collections.abc import Callable


def sync(
    settings,
    source: str,
    dest: str,
    *,
    keep: int | None = None,
    as_user: str | None = None,
    marker: str | None = None,
    series: str | None = None,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
):
    """Sync SOURCE's complete checkpoints to DEST under `settings.sync` (keep, marker: these override it): the
    report (report.SyncReport). Bad arguments raise UsageError; a sync that cannot start, SlurmkitError; a
    checkpoint that failed or was deferred is in the report's errors/deferred, not raised."""
    from .patterns import check_disjoint, foreign_owner, validate_location
    from .report import SyncError
    from ..errors import SlurmkitError, UsageError

    cfg = settings.sync
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
    from .privsep import preload, run_as
    from .syncdir import sync_dir

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
    return rep
