"""A filesystem destination (the shared-filesystem case) behind the Dest protocol."""
from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time

from . import manifest as mf
from .engine import _copy_verify, run_parallel
from .layout import LOCK_NAME, OLD_PREFIX, TMP_PREFIX, is_hidden
from .report import Deferred, SyncError
from .safeio import _exchange, durable, open_nofollow
from .selection import _is_regular

class FsDest:
    """A filesystem destination (the shared-filesystem case)."""

    def __init__(self, root: str):
        self.root = root
        self._lockfd = None

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
        for name in self.scan()[2]:
            if name.startswith(TMP_PREFIX) and name[len(TMP_PREFIX):] in resume:
                continue
            shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
            removed.append(name)
        return removed

    def publish(self, src: str, name: str, man: dict, *, deadline, workers: int, progress) -> int:
        tmp = os.path.join(self.root, TMP_PREFIX + name)
        os.makedirs(tmp, exist_ok=True)
        if os.path.islink(tmp):
            raise SyncError(f"{tmp}: is a symlink (refused)")
        algo = man.get("algo", mf.DEFAULT_ALGO)
        wanted = {f["path"] for f in man["files"]}
        # a stale manifest from an earlier attempt must not make a half-resumed copy look complete
        for stale in (mf.MANIFEST, f".{mf.MANIFEST}.tmp"):
            try:
                os.unlink(os.path.join(tmp, stale))
            except FileNotFoundError:
                pass
        dirs = {tmp}
        for f in man["files"]:
            d = os.path.dirname(os.path.join(tmp, *f["path"].split("/")))
            while d not in dirs and d.startswith(tmp):
                dirs.add(d)
                d = os.path.dirname(d)
        for d in sorted(dirs):
            os.makedirs(d, exist_ok=True)
        copied = [0]
        lock = threading.Lock()

        def one(f: dict) -> None:
            rel = f["path"]
            dpath = os.path.join(tmp, *rel.split("/"))
            sfd = open_nofollow(src, rel)
            try:
                st = os.fstat(sfd)
                if st.st_size != f["size"]:
                    raise SyncError(f"{name}/{rel}: size {st.st_size} != manifest {f['size']} (changed?)")
                if _is_regular(dpath) and os.lstat(dpath).st_size == f["size"]:
                    if mf.hash_file(dpath, algo) == (f["size"], f["hash"]):
                        return  # resumed: already copied and verified by an interrupted run
                try:
                    os.unlink(dpath)
                except FileNotFoundError:
                    pass
                dfd = os.open(dpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                              (st.st_mode & 0o777) | 0o600)
                try:
                    # copy (made durable by one syncfs below) while a second thread hashes the bytes now at
                    # the destination right behind it: the verification overlaps the copy
                    got = _copy_verify(sfd, dfd, f["size"], algo, deadline, progress)
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
            if got != (f["size"], f["hash"]):
                os.unlink(dpath)
                raise SyncError(f"{name}/{rel}: verification failed at the destination "
                                f"({algo} {got[1][:12]} != manifest {f['hash'][:12]})")
            with lock:
                copied[0] += f["size"]

        run_parallel(one, sorted(man["files"], key=lambda f: -f["size"]), workers)  # big shards first
        # anything in the temporary copy the manifest does not list goes (left by an older attempt)
        for dirpath, dirnames, filenames in os.walk(tmp, topdown=False):
            for n in filenames:
                full = os.path.join(dirpath, n)
                if os.path.relpath(full, tmp).replace(os.sep, "/") not in wanted:
                    os.unlink(full)
            for n in dirnames:
                full = os.path.join(dirpath, n)
                if os.path.islink(full):
                    os.unlink(full)
                elif full not in dirs:
                    try:
                        os.rmdir(full)
                    except OSError:
                        pass
        # one syncfs for the whole copy instead of an fsync per file: the same durability (every file's data and
        # metadata on disk before the manifest is written) for one journal commit instead of hundreds
        durable(tmp, [os.path.join(tmp, *f["path"].split("/")) for f in man["files"]])
        for d in sorted(dirs, reverse=True):
            mf.fsync_dir(d)
        if deadline is not None and time.monotonic() > deadline:
            raise Deferred()
        mf.write(tmp, man)  # the manifest last: from here on the copy is complete
        final = os.path.join(self.root, name)
        if os.path.lexists(final):  # a changed checkpoint of the same name: swap, then delete the old one
            old = os.path.join(self.root, OLD_PREFIX + name)
            shutil.rmtree(old, ignore_errors=True)
            if _exchange(tmp, final):  # one atomic step: NAME is never missing
                os.rename(tmp, old)
            else:
                os.rename(final, old)
                os.rename(tmp, final)
            mf.fsync_dir(self.root)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
            mf.fsync_dir(self.root)
        return copied[0]

    def remove(self, name: str) -> None:
        old = os.path.join(self.root, OLD_PREFIX + name)
        shutil.rmtree(old, ignore_errors=True)
        os.rename(os.path.join(self.root, name), old)  # out of sight in one step, then delete
        mf.fsync_dir(self.root)
        shutil.rmtree(old, ignore_errors=True)

