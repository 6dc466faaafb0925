"""Opening and syncing files without following links; the kernel calls the copy engine needs (ctypes)."""

from __future__ import annotations

import errno
import os
import stat

from .report import SyncError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _refused(rel: str, e: OSError) -> SyncError:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return SyncError(f"{rel}: is a symlink or not a directory (refused)")
    return SyncError(f"{rel}: {e.strerror}")


def opendir_at(dir_fd: int, rel: str, *, create: bool = False, mode: int = 0o755) -> int:
    """A directory fd for dir_fd/rel, every component opened without following a link (created as a real
    directory first when `create`); a symlink anywhere is refused (SyncError), never followed."""
    fd = os.dup(dir_fd)
    try:
        for part in [p for p in rel.split("/") if p]:
            if create:
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    raise
                raise _refused(rel, e) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_nofollow(root: str, rel: str) -> int:
    """Open root/rel for reading without following a symlink anywhere below root; refuse non-regular files."""
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SyncError(f"{rel}: is a symlink (refused)") from None
        raise SyncError(f"{rel}: {e.strerror}") from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(ffd).st_mode):
        os.close(ffd)
        raise SyncError(f"{rel}: not a regular file (refused)")
    return ffd


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes  # preloaded before a privilege drop

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _start_writeback(fd: int, off: int, n: int) -> None:
    """Start writing a verified range to disk now (sync_file_range WRITE, asynchronous), so the final syncfs
    has little left to wait for: the disk works while the copy goes on."""
    try:
        import ctypes

        _libc().sync_file_range(fd, ctypes.c_int64(off), ctypes.c_int64(n), 2)  # SYNC_FILE_RANGE_WRITE
    except (ImportError, OSError, AttributeError):
        pass


def _exchange(a: str, b: str, dir_fd: int = -100) -> bool:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE), relative to dir_fd (default: the cwd); False
    where the kernel or filesystem can't."""
    try:
        libc = _libc()
        return libc.renameat2(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), 2) == 0  # RENAME_EXCHANGE
    except (ImportError, OSError, AttributeError):
        return False


def durable(root: str, files: list[str]) -> None:
    """Make `files` (all under root) durable: syncfs(2) on root's filesystem, else an fsync per file."""
    try:
        libc = _libc()
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (ImportError, OSError, AttributeError):
        pass
    for p in files:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def durable_fd(dir_fd: int) -> None:
    """syncfs(2) on the filesystem of an open directory: every file written there is on disk after it."""
    try:
        if _libc().syncfs(dir_fd) == 0:
            return
    except (ImportError, OSError, AttributeError):
        pass
    os.sync()
