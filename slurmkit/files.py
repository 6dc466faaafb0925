"""Files slurmkit writes for itself: the one atomic-write helper and the one cache directory.

`atomic_write`: the bytes land in a temporary file beside the target and replace it in one rename, so a reader
sees the old file or the new one, never a part; `mode` is the new file's, `nofollow` refuses a link planted at the
temporary name (the target itself is replaced, never followed, by rename).

`cache_dir(name)`: $XDG_CACHE_HOME/slurmkit/<name> (~/.cache when unset, empty or relative, as the XDG spec says),
made private. A cache holds what slurmkit will run or ship (compiled templates, wheelhouses, a venv for every node),
so an entry is trusted only from a directory that is ours alone: each of `slurmkit/` and `<name>/` a real
directory (no link) owned by the effective user and closed to group and others, below a parent that no one else
can rename it out of (not writable by others, or sticky). Anything else, a shared cache under `sudo -E`, a
directory another user made first, gives None: the caller then works without a cache. SLURMKIT_NO_CACHE=1 too.
"""

from __future__ import annotations

import os
import stat


def publish(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename a finished file or directory into place in one step (os.replace: a reader sees the old or the new,
    never a part). slurmkit's one rename into place; checkpoint/fsdest.py keeps its own, relative to directory
    descriptors (nothing under a destination is reached through a path that a link could redirect)."""
    os.replace(src, dst)


def atomic_write(path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644, fsync: bool = False) -> None:
    """Write `data` to `path` in one rename: the old content or the new, never a part. The temporary file beside
    it is created exclusively and without following a link (O_EXCL | O_NOFOLLOW: a name planted in the directory is
    never opened), with `mode`; fsync: the data and the rename reach the disk before this returns."""
    path = os.fspath(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask does not narrow what the caller asked for
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        publish(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def rotate(base: str, keep: int) -> None:
    """Log generations: `base` -> `base.1` -> ... -> `base.keep`; the oldest beyond `keep` is removed (keep 0:
    `base` itself is)."""
    if keep < 1:
        os.unlink(base)
        return
    for i in range(keep - 1, 0, -1):
        src = f"{base}.{i}"
        if os.path.exists(src):
            publish(src, f"{base}.{i + 1}")
    publish(base, f"{base}.1")


def private(path: str | os.PathLike) -> bool:
    """A real directory (not a link) owned by the effective user, that group and others cannot write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o022


def _safe_parent(path: str) -> bool:
    """No one else can move entries out of this directory: owned by us or root, and not writable by group or
    others unless sticky (as /tmp)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        return False
    return not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX)


def cache_base() -> str:
    """$XDG_CACHE_HOME/slurmkit, or ~/.cache/slurmkit (an empty or relative XDG_CACHE_HOME is ignored)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmkit")


def cache_dir(name: str) -> str | None:
    """The private cache directory `name` (made 0700 where missing), or None where it is not ours alone."""
    if os.environ.get("SLURMKIT_NO_CACHE"):
        return None
    top = cache_base()
    d = os.path.join(top, name)
    try:
        os.makedirs(os.path.dirname(top), mode=0o700, exist_ok=True)
        if not _safe_parent(os.path.dirname(top)):
            return None
        for p in (top, d):
            try:
                os.mkdir(p, 0o700)
            except FileExistsError:
                pass
            if not private(p):
                return None
    except OSError:
        return None
    return d


def read_trusted(path: str, limit: int) -> bytes | None:
    """The bytes of `path` when only root or we could have written them: a regular file (a link is not followed)
    owned by root or the effective user, not writable by group or others, in a directory no one else can change
    entries of (the cache's parent rule). None for anything else, or when it is missing or over `limit` bytes."""
    if not _safe_parent(os.path.dirname(os.path.abspath(path))):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)  # the file opened, not the name: no swap between the check and the read
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None
