"""A filesystem destination (the shared-filesystem case) behind the Dest protocol."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
import threading
import time

from . import manifest as mf
from .engine import Verifier, _Job, copy_to, run_parallel
from .layout import LOCK_NAME, OLD_PREFIX, TMP_PREFIX, is_hidden
from .report import Deferred, SyncError
from .safeio import _exchange, durable_fd, lstat_at, open_nofollow, opendir_at
from .selection import _is_regular


class FsDest:
    """A filesystem destination (the shared-filesystem case)."""

    def __init__(self, root: str):
        self.root = root
        self._lockfd: int | None = None

    def __str__(self):
        return self.root

    def prepare(self, dry_run: bool = False) -> None:
        if not dry_run:
            os.makedirs(self.root, exist_ok=True)

    def lock(self, deadline: float | None) -> None:
        fd = os.open(os.path.join(self.root, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lockfd = fd
                return
            except BlockingIOError:
                if deadline is not None and time.monotonic() > deadline:
                    os.close(fd)
                    raise Deferred() from None
                time.sleep(0.2)

    def unlock(self) -> None:
        if self._lockfd is not None:
            os.close(self._lockfd)
            self._lockfd = None

    def scan(self) -> tuple[dict[str, dict], list[str], list[str]]:
        """({name: manifest} complete, [other visible names], [our temporary names])."""
        complete, other, temps = {}, [], []
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return {}, [], []
        for name in names:
            p = os.path.join(self.root, name)
            if name.startswith((TMP_PREFIX, OLD_PREFIX)):
                temps.append(name)
                continue
            if is_hidden(name) or os.path.islink(p) or not os.path.isdir(p):
                continue
            m = mf.read(p) if _is_regular(os.path.join(p, mf.MANIFEST)) else None
            if m is None:
                other.append(name)
            else:
                complete[name] = m
        return complete, other, temps

    def cleanup(self, resume: list[str]) -> list[str]:
        """Remove leftovers of an interrupted run, except temporary copies of checkpoints about to be resumed."""
        removed = []
        rootfd = self._rootfd()
        try:
            for name in self.scan()[2]:
                if name.startswith(TMP_PREFIX) and name[len(TMP_PREFIX) :] in resume:
                    continue
                self._discard(rootfd, name)
                removed.append(name)
        finally:
            os.close(rootfd)
        return removed

    # --- publishing, every path under DEST opened from a directory fd without following links -------------

    def _rootfd(self) -> int:
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))

    def _tmp_is_ours(self, rootfd: int, tmpname: str) -> bool:
        """A resumable temporary copy: a real directory we own holding only directories and regular files
        (anything else was not written by us: it is removed, never written through)."""
        st = lstat_at(rootfd, tmpname)
        if st is None:
            return True
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return False

        def clean(fd: int, depth: int) -> bool:
            if depth > 64:
                return False
            with os.scandir(fd) as it:
                for e in it:
                    if e.is_symlink():
                        return False
                    if e.is_dir(follow_symlinks=False):
                        sub = opendir_at(fd, e.name)
                        try:
                            if not clean(sub, depth + 1):
                                return False
                        finally:
                            os.close(sub)
                    elif not e.is_file(follow_symlinks=False):
                        return False
            return True

        try:
            tfd = opendir_at(rootfd, tmpname)
        except SyncError:
            return False
        try:
            return clean(tfd, 0)
        finally:
            os.close(tfd)

    def _discard(self, rootfd: int, name: str) -> None:
        st = lstat_at(rootfd, name)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=rootfd, ignore_errors=True)  # fd-based: never follows a link
        else:
            os.unlink(name, dir_fd=rootfd)

    def publish(self, src: str, name: str, man: dict, *, deadline, workers: int, progress) -> int:
        rootfd = self._rootfd()
        tmpname = TMP_PREFIX + name
        try:
            if not self._tmp_is_ours(rootfd, tmpname):
                self._discard(rootfd, tmpname)  # planted or foreign: start over, never write through it
            tfd = opendir_at(rootfd, tmpname, create=True)
            try:
                try:
                    copied = self._fill(tfd, src, name, man, deadline=deadline, workers=workers, progress=progress)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        # a full destination must not stay full of our partial copy: the next run starts over
                        os.close(tfd)
                        tfd = -1
                        self._discard(rootfd, tmpname)
                    raise
            finally:
                if tfd >= 0:
                    os.close(tfd)
            self._swap_in(rootfd, tmpname, name)
            return copied
        finally:
            os.close(rootfd)

    def _fill(self, tfd: int, src: str, name: str, man: dict, *, deadline, workers: int, progress) -> int:
        """Make the temporary copy (dir fd tfd) match the manifest, verified, durable, the manifest last."""
        algo = man.get("algo", mf.DEFAULT_ALGO)
        wanted = {f["path"] for f in man["files"]}
        # a stale manifest from an earlier attempt must not make a half-resumed copy look complete
        for stale in (mf.MANIFEST, f".{mf.MANIFEST}.tmp"):
            try:
                os.unlink(stale, dir_fd=tfd)
            except FileNotFoundError:
                pass
        dirs = {""}
        for f in man["files"]:
            d = f["path"].rpartition("/")[0]
            while d not in dirs:
                dirs.add(d)
                d = d.rpartition("/")[0]
        for d in sorted(dirs):
            if d:
                os.close(opendir_at(tfd, d, create=True))
        copied = [0]
        lock = threading.Lock()
        verifier = Verifier(workers)
        jobs: list[tuple[dict, _Job]] = []  # (manifest entry, its hash job) for each file copied

        def one(f: dict) -> None:
            rel = f["path"]
            parent, _, base = rel.rpartition("/")
            pfd = opendir_at(tfd, parent) if parent else os.dup(tfd)
            try:
                sfd = open_nofollow(src, rel)
                try:
                    st = os.fstat(sfd)
                    if st.st_size != f["size"]:
                        raise SyncError(f"{name}/{rel}: size {st.st_size} != manifest {f['size']} (changed?)")
                    if _resumed(pfd, base, f, algo):
                        return  # already copied and verified by an interrupted run
                    try:
                        os.unlink(base, dir_fd=pfd)
                    except FileNotFoundError:
                        pass
                    dfd = os.open(
                        base,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                        (st.st_mode & 0o777) | 0o600,
                        dir_fd=pfd,
                    )
                    try:
                        # the verifier hashes the bytes now at the destination, behind the copies (engine.py)
                        job = copy_to(verifier, sfd, dfd, f["size"], algo, deadline, progress)
                    finally:
                        os.close(dfd)
                finally:
                    os.close(sfd)
            finally:
                os.close(pfd)
            with lock:
                jobs.append((f, job))
                copied[0] += f["size"]

        try:
            run_parallel(one, sorted(man["files"], key=lambda f: -f["size"]), workers)  # big shards first
            _prune_unlisted(tfd, "", wanted, dirs)  # anything an older attempt left that the manifest does not list
        except BaseException:
            verifier.finish(abort=True)
            raise
        verifier.copies_done()
        # one syncfs for the whole copy instead of an fsync per file: the same durability (every file's data and
        # metadata on disk before the manifest is written) for one journal commit instead of hundreds; started
        # now, while the last hashes run (the flush is mostly waiting on the disk)
        flushed: list[BaseException | None] = []
        flusher = threading.Thread(target=_flush, args=(tfd, flushed), daemon=True)
        flusher.start()
        verifier.finish()
        flusher.join()
        for f, job in jobs:
            got = job.result
            if isinstance(got, BaseException):
                raise got
            assert got is not None  # finish() returned: every job has its result
            if got != (f["size"], f["hash"]):
                rel = f["path"]
                parent, _, base = rel.rpartition("/")
                pfd = opendir_at(tfd, parent) if parent else os.dup(tfd)
                try:
                    os.unlink(base, dir_fd=pfd)
                finally:
                    os.close(pfd)
                raise SyncError(
                    f"{name}/{rel}: verification failed at the destination "
                    f"({algo} {got[1][:12]} != manifest {f['hash'][:12]})"
                )
        if flushed and flushed[0] is not None:
            raise flushed[0]
        for d in sorted(dirs, reverse=True):
            dfd = opendir_at(tfd, d) if d else os.dup(tfd)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        if deadline is not None and time.monotonic() > deadline:
            raise Deferred()
        _write_manifest_at(tfd, man)  # the manifest last: from here on the copy is complete
        return copied[0]

    def _swap_in(self, rootfd: int, tmpname: str, name: str) -> None:
        if lstat_at(rootfd, name) is not None:  # a changed checkpoint of the same name: swap, delete the old
            old = OLD_PREFIX + name
            self._discard(rootfd, old)
            if _exchange(tmpname, name, rootfd):  # one atomic step: NAME is never missing
                os.rename(tmpname, old, src_dir_fd=rootfd, dst_dir_fd=rootfd)
            else:
                os.rename(name, old, src_dir_fd=rootfd, dst_dir_fd=rootfd)
                os.rename(tmpname, name, src_dir_fd=rootfd, dst_dir_fd=rootfd)
            os.fsync(rootfd)
            self._discard(rootfd, old)
        else:
            os.rename(tmpname, name, src_dir_fd=rootfd, dst_dir_fd=rootfd)
            os.fsync(rootfd)

    def remove(self, name: str) -> None:
        rootfd = self._rootfd()
        try:
            old = OLD_PREFIX + name
            self._discard(rootfd, old)
            os.rename(name, old, src_dir_fd=rootfd, dst_dir_fd=rootfd)  # out of sight in one step, then delete
            os.fsync(rootfd)
            self._discard(rootfd, old)
        finally:
            os.close(rootfd)


def _flush(tfd: int, out: list) -> None:
    """syncfs on tfd's filesystem (on a thread of its own); out gets None, or the error."""
    try:
        durable_fd(tfd)
        out.append(None)
    except BaseException as e:  # noqa: BLE001 - raised by the caller
        out.append(e)


def _resumed(pfd: int, base: str, f: dict, algo: str) -> bool:
    """The file is already at the destination (a regular file, not a link) with the manifest's size and hash."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=pfd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size == f["size"] and mf.hash_fd(fd, algo) == (f["size"], f["hash"])
    finally:
        os.close(fd)


def _prune_unlisted(dfd: int, rel: str, wanted: set[str], dirs: set[str]) -> None:
    with os.scandir(dfd) as it:
        entries = list(it)
    for e in entries:
        sub = f"{rel}/{e.name}" if rel else e.name
        if e.is_dir(follow_symlinks=False):
            cfd = opendir_at(dfd, e.name)
            try:
                _prune_unlisted(cfd, sub, wanted, dirs)
            finally:
                os.close(cfd)
            if sub not in dirs:
                try:
                    os.rmdir(e.name, dir_fd=dfd)
                except OSError:
                    pass
        elif e.is_symlink() or sub not in wanted:
            os.unlink(e.name, dir_fd=dfd)


def _write_manifest_at(tfd: int, man: dict) -> None:
    """The manifest into the directory tfd atomically (tmp + fsync + rename + fsync dir), no link followed."""
    tmp = f".{mf.MANIFEST}.tmp"
    data = json.dumps(man, indent=1).encode()
    try:
        os.unlink(tmp, dir_fd=tfd)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=tfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, mf.MANIFEST, src_dir_fd=tfd, dst_dir_fd=tfd)
    os.fsync(tfd)
