"""Checkpoint sync: copy a job's complete checkpoints from node-local disk to a shared destination, atomically,
verified, as the job's user. The epilog calls `sync_for_job(settings, environ)` first, before its health verdict.

Layout. SOURCE holds one subdirectory per checkpoint, named so that lexical order is step order
(`step-0000001200`); names starting with '.' (the helper's `.tmp-*`, our own files) are never checkpoints. A
checkpoint is complete when it holds a valid `slurmkit-manifest.json` (written last by slurmkit's helper) or, for
other writers, the configured marker file (the manifest is then built here, at sync time). Anything else is
incomplete and never copied.

Publishing. Each checkpoint is copied to DEST/.slurmkit-tmp-NAME, every file verified against the manifest (size
and hash of the bytes at the destination), fsynced, the manifest written last, the directory fsynced, then renamed
to DEST/NAME and DEST fsynced. Retention renames the oldest beyond `keep` to DEST/.slurmkit-old-NAME (one atomic
step out of sight) and then deletes it. Killed anywhere, DEST holds complete checkpoints only, plus at most a
temporary directory that the next run resumes (files already there with the right size and hash are kept) or
removes. An unchanged checkpoint (same manifest) already at DEST is skipped without reading its data.

Privileges. When run as root (the epilog), all of the above happens in a forked child that has dropped to the
job's uid, gid and supplementary groups before it touches any user path; a symlink in the user's directory copies
nothing the user could not read, and symlinks inside a checkpoint are refused outright (never followed).

Budget. The child stops between chunks when the budget is spent; the parent kills it at the budget's end if it
does not, and does not wait for it past a short grace: a child asleep in the kernel on a destination that does not
answer (a frozen filesystem, a hung NFS server) cannot die until the destination answers ("deferred: destination not
answering"; sync.drain_on_hang drains for it). What was left is finished by a detached background sync (`python -m
slurmkit.checkpoint.sync background ...`) or by `slurmkit sync` by hand; the health log (context "sync") says which.

Light: standard library only on this path; boto3 is imported only for an s3:// destination (checkpoint/s3.py).

Modules, one concern each (this one re-exports their names and runs the background finish):
layout (names on disk, shared with the job-side helper), patterns (SOURCE/DEST over the job's variables),
selection (complete checkpoints, the plan), safeio (no-follow opens, syncfs), engine (copy + verify),
dest (the Dest protocol) with fsdest and s3, syncdir (one sync as the caller), privsep (as the job's user),
jobfile (the job's narrowing file), report (SyncError, Deferred, SyncReport), epilog (sync_for_job).
"""

from __future__ import annotations

import json
import os
import sys

from .dest import Dest, make_dest
from .engine import COPY_CHUNK, VERIFY_CHUNK, Verifier, _copy_fd, _copy_verify, copy_to, run_parallel
from .epilog import _job_sync, _job_sync_rel, _log, _spawn_background, manual_command, sync_for_job
from .fsdest import FsDest
from .jobfile import read_job_file
from .layout import LOCK_NAME, OLD_PREFIX, TMP_PREFIX
from .patterns import (
    VARIABLES,
    check_disjoint,
    expand,
    foreign_owner,
    pattern_variables,
    validate_location,
    with_job_record,
)
from .privsep import _home, drop_privileges, job_identity, preload, run_as
from .report import Deferred, SyncError, SyncReport, empty_report
from .safeio import _exchange, _libc, _start_writeback, durable, open_nofollow
from .selection import _is_regular, _same, _symlinks_in, build_marker_manifest, plan, scan_source
from .syncdir import sync_dir

__all__ = [
    "COPY_CHUNK",
    "VERIFY_CHUNK",
    "LOCK_NAME",
    "OLD_PREFIX",
    "TMP_PREFIX",
    "VARIABLES",
    "Deferred",
    "Dest",
    "FsDest",
    "SyncError",
    "SyncReport",
    "build_marker_manifest",
    "drop_privileges",
    "durable",
    "empty_report",
    "expand",
    "job_identity",
    "make_dest",
    "open_nofollow",
    "pattern_variables",
    "plan",
    "preload",
    "read_job_file",
    "run_as",
    "run_parallel",
    "scan_source",
    "sync_dir",
    "sync_for_job",
    "validate_location",
    "with_job_record",
    "check_disjoint",
    "foreign_owner",
    "manual_command",
    # private names some callers and tests reach for
    "_copy_fd",
    "_copy_verify",
    "Verifier",
    "copy_to",
    "_job_sync",
    "_job_sync_rel",
    "_log",
    "_spawn_background",
    "_home",
    "_exchange",
    "_libc",
    "_start_writeback",
    "_is_regular",
    "_same",
    "_symlinks_in",
]


def _main(argv: list[str]) -> int:
    """`python -m slurmkit.checkpoint.sync background`: the detached finish of an epilog's sync."""
    if argv[:1] != ["background"]:
        print("usage: python -m slurmkit.checkpoint.sync background", file=sys.stderr)
        return 2
    from .. import config

    settings = config.load()
    rep = sync_for_job(settings, dict(os.environ), budget=float("inf"), background=False, context="sync-background")
    print(json.dumps(rep.as_dict()))
    return 0 if rep["status"] in ("ok", "nothing", "disabled") else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
