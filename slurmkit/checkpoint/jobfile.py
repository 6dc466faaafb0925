"""A job's narrowing file in its source dir (read as the job's user): it can only narrow the site's sync."""

from __future__ import annotations

import os

from ..record import Record
from .report import SyncError
from .safeio import open_nofollow


class JobSync(Record):
    """The job's own sync file (.slurmkit-sync.yaml): what a job may ask of the epilog's sync."""

    enabled: bool = True
    keep: int | None = None
    subdir: str | None = None


def read_job_file(source: str, name: str) -> dict:
    """The job's own narrowing of the site's sync (YAML in its source dir): {enabled?, keep?, subdir?}.
    Only narrows: keep can only go down, subdir only goes below the site's destination."""
    path = os.path.join(source, name)
    try:
        fd = open_nofollow(source, name)
    except SyncError as e:
        if "No such file" in str(e):
            return {}
        raise
    with os.fdopen(fd, "rb") as f:
        text = f.read(65536).decode("utf-8", "replace")
    from ..typedyaml import parse_yaml

    try:
        js = parse_yaml(text, JobSync, path)
    except Exception as e:  # noqa: BLE001 - UsageError with file:line; reported, sync goes on with site values
        raise SyncError(str(e)) from None
    out: dict = {"enabled": js.enabled}
    if js.keep is not None:
        if js.keep < 1:
            raise SyncError(f"{path}: keep must be at least 1")
        out["keep"] = js.keep
    if js.subdir is not None:
        parts = js.subdir.split("/")
        if js.subdir.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise SyncError(f"{path}: subdir must be a relative path without '.', '..' or hidden parts")
        out["subdir"] = js.subdir
    return out
