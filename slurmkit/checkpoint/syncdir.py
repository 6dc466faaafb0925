"""sync_dir: one sync of SOURCE to a destination, as the calling user (plan, copy, verify, publish, prune)."""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from . import manifest as mf
from .dest import make_dest
from .report import Deferred, SyncError, SyncReport, empty_report
from ..settings import SyncSettings
from .patterns import check_disjoint
from .selection import _same, _symlinks_in, build_marker_manifest, plan, scan_source, series_of


def sync_dir(
    source: str,
    dest: str,
    *,
    keep: int,
    marker: str | None = None,
    algo: str = mf.DEFAULT_ALGO,
    deadline: float | None = None,
    workers: int = 2,
    dry_run: bool = False,
    progress=None,
    on_total=None,
    settings: SyncSettings | None = None,
    series: str | None = None,
    only: list[str] | None = None,
) -> SyncReport:
    """Sync the complete checkpoints of `source` to `dest` (a path or s3://...) as the CALLING user.
    Returns the report; never raises for a problem with one checkpoint (it goes into report['errors']).
    `series` (the epilog passes the job id): stamp what is published with it, and let retention prune only
    that series' checkpoints (see selection.plan). `only` (the replicator, issue 29): consider just these
    complete checkpoints of `source` (the newest one), as if the others were not there."""
    t0 = time.monotonic()
    rep = empty_report(source, dest)
    src_ckpts: dict[str, Any] = {}  # name -> manifest, or "marker"
    try:
        check_disjoint(source, dest)
        # a manifest that is there but refused (unsupported algo, over the size limits) is an error, not a wait
        src_ckpts, rep["incomplete"] = scan_source(source, marker, problems=rep.errors)
        if only is not None:
            src_ckpts = {n: m for n, m in src_ckpts.items() if n in only}
        if not src_ckpts and not dry_run:
            # nothing complete to sync: touch nothing at DEST (no directory, no lock file for every job)
            rep["seconds"] = round(time.monotonic() - t0, 3)
            rep["status"] = "failed" if rep["errors"] else "ok"
            return rep
        d = make_dest(dest, settings)
        d.prepare(dry_run)
        if not dry_run:
            d.lock(deadline)
        try:
            dst_ckpts, _, _ = d.scan()
            p = plan(src_ckpts, dst_ckpts, keep, series)
            rep["skipped"] = p["skip"]
            if series is not None and p["foreign"]:
                rep["kept_other_jobs"] = p["foreign"]  # at DEST, not this job's: never pruned here
            for name in p["conflict"]:
                rep["errors"].append(
                    f"{name}: DEST already holds a checkpoint of that name from another job "
                    f"({series_of(dst_ckpts[name]) or 'unstamped'}); not replaced"
                )
            if on_total:
                on_total(
                    sum(f["size"] for n in p["copy"] if isinstance(src_ckpts[n], dict) for f in src_ckpts[n]["files"])
                )
            if dry_run:
                rep.update(copy=p["copy"], prune=p["prune"], status="dry-run")
                rep["would_copy_bytes"] = sum(
                    f["size"] for n in p["copy"] if isinstance(src_ckpts[n], dict) for f in src_ckpts[n]["files"]
                )
                return rep
            rep["cleaned"] = d.cleanup(p["copy"])
            todo = list(p["copy"])
            while todo:
                name = todo[0]
                ck = os.path.join(source, name)
                try:
                    man = src_ckpts[name]
                    if man == "marker":
                        assert marker is not None  # scan_source says "marker" only when given one
                        rep["refused"] += [f"{name}/{s}" for s in _symlinks_in(ck)]
                        man = build_marker_manifest(ck, marker, algo)
                        if _same(man, dst_ckpts.get(name)):
                            rep["skipped"].append(name)
                            todo.pop(0)
                            continue
                    if series is not None:
                        man = {**man, "sync": {"series": series}}
                    rep["bytes"] += d.publish(ck, name, man, deadline=deadline, workers=workers, progress=progress)
                    rep["copied"].append(name)
                except Deferred:
                    break
                except (SyncError, OSError) as e:
                    rep["errors"].append(f"{name}: {e}")
                    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                        todo.pop(0)
                        break  # the rest would fail the same way; the next run resumes or cleans up
                todo.pop(0)
            rep["deferred"] += todo
            if not todo and not rep["errors"]:  # prune only once every wanted checkpoint is there
                for name in p["prune"]:
                    try:
                        d.remove(name)
                        rep["pruned"].append(name)
                        rep["prune_reason"] = f"keep={keep}: older than the newest {keep}" + (
                            f" of job {series}" if series is not None else ""
                        )
                    except OSError as e:
                        rep["errors"].append(f"prune {name}: {e}")
        finally:
            if not dry_run:
                d.unlock()
    except Deferred:  # the lock was not free within the budget: every wanted checkpoint is left
        rep["deferred"] += sorted(src_ckpts)[-keep:] or ["*"]
    except (SyncError, OSError) as e:
        rep["errors"].append(str(e))
    rep["seconds"] = round(time.monotonic() - t0, 3)
    rep["status"] = "failed" if rep["errors"] else ("partial" if rep["deferred"] else rep["status"])
    return rep
