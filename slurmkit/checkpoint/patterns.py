"""Where: SOURCE and DEST patterns over the job's variables (pure, but for one `scontrol show job`)."""

from __future__ import annotations

import os
import re
import stat

from .report import SyncError

VARIABLES = (
    "SLURM_JOB_USER",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_UID",
    "SLURM_JOB_GID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_PARTITION",
    "SLURMD_NODENAME",
    "SLURM_CLUSTER_NAME",
)


_VAR_RE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


_FROM_JOB_RECORD = {
    "SLURM_JOB_NAME": "JobName",
    "SLURM_JOB_ACCOUNT": "Account",
    "SLURM_JOB_PARTITION": "Partition",
    "SLURM_ARRAY_JOB_ID": "ArrayJobId",
    "SLURM_ARRAY_TASK_ID": "ArrayTaskId",
}


def pattern_variables(*patterns: str) -> set[str]:
    return {m.group(1) or m.group(2) for p in patterns for m in _VAR_RE.finditer(p or "")}


def job_record_needs(environ: dict[str, str], patterns: tuple[str, ...]) -> list[str]:
    """The variables the patterns use that only Slurm's job record has and `environ` lacks."""
    return sorted(v for v in pattern_variables(*patterns) if v in _FROM_JOB_RECORD and not environ.get(v))


def with_job_record(environ: dict[str, str], patterns: tuple[str, ...], timeout: float) -> dict[str, str]:
    """environ, plus the variables the patterns need that the hook was not given, from `scontrol show job`.
    Only asked when something is missing; a failure leaves them missing (expand then says which)."""
    missing = job_record_needs(environ, patterns)
    job_id = environ.get("SLURM_JOB_ID", "")
    if not missing or not job_id.isdigit():
        return environ
    from ..slurm.cli_backend import CliBackend

    try:
        raw = CliBackend(timeout=timeout).job(int(job_id)).raw
    except Exception:  # noqa: BLE001 - the controller may be unreachable; expand() reports the gap
        return environ
    env = dict(environ)
    for var in missing:
        val = raw.get(_FROM_JOB_RECORD[var], "")
        if val and val not in ("(null)", "N/A"):
            env[var] = val
    return env


def expand(pattern: str, environ: dict[str, str], what: str = "path") -> str:
    """Substitute whitelisted $VARS in pattern; the result must be absolute (or s3://bucket/...) without '..'."""
    if not pattern:
        raise SyncError(f"sync {what}: no pattern configured")

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in VARIABLES:
            raise SyncError(f"sync {what}: variable ${name} is not allowed (allowed: {', '.join(VARIABLES)})")
        val = environ.get(name, "")
        if not val:
            raise SyncError(f"sync {what}: ${name} is not set for this job")
        if "/" in val or val in (".", "..") or any(c in val for c in "\0\n\r") or val.startswith("-"):
            raise SyncError(f"sync {what}: ${name}={val!r} is not a safe path component")
        return val

    out = _VAR_RE.sub(sub, pattern)
    return validate_location(out, what)


def source_absent(pattern: str, environ: dict[str, str]) -> bool:
    """True when the job's SOURCE certainly does not exist: the epilog then has nothing to sync and skips the sync
    (its imports, the forked child) on the many jobs that write no checkpoints. Decided as root without following
    a link: each component is lstat-ed only below components that are real directories, so a user's link can
    neither point this walk anywhere nor hang it on a dead mount. Anything else (a pattern that does not expand
    from the environment alone, a link, a file, an error) is False: the full sync, as the job's user, decides."""
    try:
        src = expand(pattern, environ, "source")
    except SyncError:
        return False
    if src.startswith("s3://"):
        return False
    path = ""
    for part in src.strip("/").split("/"):
        path += "/" + part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
    return False


def validate_location(loc: str, what: str = "path") -> str:
    if "\0" in loc:
        raise SyncError(f"sync {what}: NUL in path")
    if loc.startswith("s3://"):
        rest = loc[5:]
        bucket, _, prefix = rest.partition("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
            raise SyncError(f"sync {what}: bad S3 bucket name in {loc!r}")
        parts = [p for p in prefix.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise SyncError(f"sync {what}: '..' in {loc!r}")
        return "s3://" + bucket + ("/" + "/".join(parts) if parts else "")
    if not os.path.isabs(loc):
        raise SyncError(f"sync {what}: {loc!r} is not an absolute path")
    if ".." in loc.split("/"):
        raise SyncError(f"sync {what}: '..' in {loc!r}")
    return os.path.normpath(loc)


def check_disjoint(source: str, dest: str) -> None:
    """Refuse a SOURCE and a local DEST that are, after resolving links, the same directory or one inside the
    other: retention at DEST would then prune the source's checkpoints."""
    if dest.startswith("s3://"):
        return
    rs, rd = os.path.realpath(source), os.path.realpath(dest)
    if rs == rd or rd.startswith(rs.rstrip("/") + "/") or rs.startswith(rd.rstrip("/") + "/"):
        how = "the same directory" if rs == rd else ("inside SOURCE" if rd.startswith(rs) else "above SOURCE")
        raise SyncError(
            f"SOURCE {source} and DEST {dest} overlap (DEST is {how} once links are resolved: "
            f"{rs} / {rd}); refusing to sync"
        )


def foreign_owner(dest: str, uid: int) -> int | None:
    """The owner of DEST (or of its nearest existing ancestor) when that is neither `uid` nor root: a root sync
    must not write where another user can plant links."""
    if dest.startswith("s3://"):
        return None
    p = dest
    while True:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            parent = os.path.dirname(p)
            if parent == p:
                return None
            p = parent
            continue
        if stat.S_ISLNK(st.st_mode):
            st = os.stat(p)
        return st.st_uid if st.st_uid not in (uid, 0) else None
