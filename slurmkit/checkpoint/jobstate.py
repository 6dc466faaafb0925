"""What the epilog's sync needs from Slurm's job record, recorded by the prolog (issue 20.5).

Slurm gives prolog and epilog SLURM_JOB_ID/USER/UID but not the job's name, account, partition or array ids
(measured on 22.05), and a DEST pattern such as /shared/$SLURM_JOB_USER/$SLURM_JOB_NAME needs them. The epilog
asks `scontrol show job`, which fails when the controller is down or the record is gone. So the prolog, which
runs while the job record is fresh, asks once and writes the values to a root-owned state file:

    <paths.state_dir>/sync-jobs/<job id>.json      (directory 0700, file 0600, owned by the hook's user)

The epilog reads it first (before asking scontrol) and removes it once the sync is finished; files older than
STALE_SECONDS (jobs whose epilog never ran) are removed by later prologs. A file not owned by us, a link, or
anything over MAX_BYTES is ignored. Only done when the sync is enabled and its patterns need such a variable.
"""

from __future__ import annotations

import json
import os
import stat
import time

from typing import TYPE_CHECKING
from ..files import atomic_write

if TYPE_CHECKING:
    from ..settings import Settings

DIRNAME = "sync-jobs"
MAX_BYTES = 64 << 10
STALE_SECONDS = 7 * 86400


def _dir(settings: Settings) -> str:
    return os.path.join(settings.paths.state_dir, DIRNAME)


def _path(settings: Settings, job_id: str) -> str | None:
    return os.path.join(_dir(settings), f"{job_id}.json") if job_id.isdigit() else None


def remember(settings: Settings, environ) -> dict[str, str]:
    """Prolog: fetch the job-record variables the sync patterns need and store them. Never raises; returns
    what was stored ({} when nothing was needed or the record could not be read)."""
    try:
        from .patterns import job_record_needs, with_job_record

        cfg = settings.sync
        job_id = environ.get("SLURM_JOB_ID", "")
        p = _path(settings, job_id)
        needed = job_record_needs(environ, (cfg.source, cfg.dest))
        if not cfg.enabled or p is None or not needed:
            return {}
        env = with_job_record(dict(environ), (cfg.source, cfg.dest), timeout=settings.slurm.timeout)
        got = {k: env[k] for k in needed if env.get(k)}
        if not got:
            return {}
        d = _dir(settings)
        os.makedirs(d, mode=0o700, exist_ok=True)
        _prune_stale(d)
        atomic_write(p, json.dumps({"job_id": job_id, "vars": got, "time": time.time()}), mode=0o600)
        return got
    except Exception:  # noqa: BLE001 - the prolog's verdict must not depend on this; the epilog retries
        return {}


def recorded(settings: Settings, job_id: str) -> dict[str, str]:
    """Epilog: the variables the prolog stored for this job ({} when none, or the file is not trustworthy)."""
    p = _path(settings, job_id)
    if p is None:
        return {}
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size > MAX_BYTES:
            return {}
        doc = json.loads(os.read(fd, MAX_BYTES + 1))
        vals = doc.get("vars") if isinstance(doc, dict) and doc.get("job_id") == job_id else None
        return (
            {k: v for k, v in vals.items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(vals, dict)
            else {}
        )
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)


def forget(settings: Settings, job_id: str) -> None:
    p = _path(settings, job_id)
    if p:
        try:
            os.unlink(p)
        except OSError:
            pass


def _prune_stale(d: str) -> None:
    cutoff = time.time() - STALE_SECONDS
    try:
        with os.scandir(d) as it:
            for e in it:
                try:
                    if e.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(e.path)
                except OSError:
                    pass
    except OSError:
        pass
