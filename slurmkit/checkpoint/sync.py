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
does not (a hung filesystem). What was left is finished by a detached background sync (`python -m
slurmkit.checkpoint.sync background ...`) or by `slurmkit sync` by hand; the health log (context "sync") says which.

Light: standard library only on this path; boto3 is imported only for an s3:// destination (checkpoint/s3.py).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import pwd
import queue
import re
import select
import shutil
import signal
import stat
import sys
import threading
import time
from typing import TYPE_CHECKING

from . import manifest as mf

if TYPE_CHECKING:
    from ..settings import Settings, SyncSettings

# The only variables a source/dest pattern may use. Each value must be a single path component.
VARIABLES = ("SLURM_JOB_USER", "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_UID", "SLURM_JOB_GID",
             "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ACCOUNT", "SLURM_JOB_PARTITION",
             "SLURMD_NODENAME", "SLURM_CLUSTER_NAME")
TMP_PREFIX = ".slurmkit-tmp-"
OLD_PREFIX = ".slurmkit-old-"
LOCK_NAME = ".slurmkit-sync.lock"
COPY_CHUNK = 64 << 20
VERIFY_CHUNK = 16 << 20  # large files: copy in these steps, hashed right behind
_VAR_RE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


class SyncError(Exception):
    """A sync that cannot go on (bad pattern, refused path, verification failure)."""


class Deferred(Exception):
    """The budget ran out; the rest is left for the background sync."""


# --- where: patterns over the job's variables (pure) -------------------------------------------------------

# Slurm 22.05 gives the epilog SLURM_JOB_ID/USER/UID and SLURMD_NODENAME but not the job's name, account,
# partition or array ids (measured on the dev cluster). These come from Slurm's record of the job instead.
_FROM_JOB_RECORD = {"SLURM_JOB_NAME": "JobName", "SLURM_JOB_ACCOUNT": "Account", "SLURM_JOB_PARTITION": "Partition",
                    "SLURM_ARRAY_JOB_ID": "ArrayJobId", "SLURM_ARRAY_TASK_ID": "ArrayTaskId"}


def pattern_variables(*patterns: str) -> set[str]:
    return {m.group(1) or m.group(2) for p in patterns for m in _VAR_RE.finditer(p or "")}


def with_job_record(environ: dict[str, str], patterns: tuple[str, ...], timeout: float) -> dict[str, str]:
    """environ, plus the variables the patterns need that the hook was not given, from `scontrol show job`.
    Only asked when something is missing; a failure leaves them missing (expand then says which)."""
    missing = [v for v in pattern_variables(*patterns) if v in _FROM_JOB_RECORD and not environ.get(v)]
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


def job_identity(environ: dict[str, str], allow_root: bool = False) -> tuple[int, int, str]:
    """(uid, gid, user) of the job from Slurm's variables, cross-checked against the passwd database."""
    try:
        uid = int(environ["SLURM_JOB_UID"])
    except (KeyError, ValueError):
        raise SyncError("SLURM_JOB_UID is missing or not a number") from None
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise SyncError(f"uid {uid} is not a known user") from None
    user = environ.get("SLURM_JOB_USER") or pw.pw_name
    if user != pw.pw_name:
        raise SyncError(f"SLURM_JOB_USER={user!r} is not uid {uid} ({pw.pw_name})")
    gid = environ.get("SLURM_JOB_GID")
    gid = int(gid) if gid and gid.isdigit() else pw.pw_gid
    if uid == 0 and not allow_root:
        raise SyncError("refusing to sync a root job's checkpoints as root")
    return uid, gid, user


# --- what: complete checkpoints (pure over the filesystem as the caller sees it) -----------------------------

def _same(a: dict | None, b: dict | None) -> bool:
    if not a or not b:
        return False
    key = lambda m: (m.get("algo", mf.DEFAULT_ALGO), m.get("step"),  # noqa: E731
                     sorted((f["path"], f["size"], f["hash"]) for f in m["files"]))
    return key(a) == key(b)


def scan_source(root: str, marker: str | None = None) -> tuple[dict[str, dict | str], list[str]]:
    """({name: manifest, or "marker" when complete by marker only}, [incomplete names]); names sorted."""
    complete: dict[str, dict | str] = {}
    incomplete = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return {}, []
    for name in names:
        if name.startswith("."):
            continue
        p = os.path.join(root, name)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):  # a symlinked checkpoint directory is refused, not followed
            continue
        m = mf.read(p) if _is_regular(os.path.join(p, mf.MANIFEST)) else None
        if m is not None:
            complete[name] = m
        elif marker and _is_regular(os.path.join(p, marker)):
            complete[name] = "marker"
        else:
            incomplete.append(name)
    return complete, incomplete


def _is_regular(p: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


def plan(source: dict[str, dict | str], dest: dict[str, dict], keep: int) -> dict:
    """What to copy (newest first), skip (already there, unchanged) and prune so DEST ends with the newest `keep`
    complete checkpoints of source and DEST together. Pure."""
    wanted = sorted(source)[-keep:]
    final = sorted(set(dest) | set(wanted))[-keep:]
    copy, skip = [], []
    for name in reversed(wanted):
        if name not in final:
            continue
        m = source[name]
        if isinstance(m, dict) and _same(m, dest.get(name)):
            skip.append(name)
        else:
            copy.append(name)  # a marker checkpoint is compared after its manifest is built
    prune = [n for n in sorted(dest) if n not in final]
    return {"copy": copy, "skip": skip, "prune": prune, "final": final}


def build_marker_manifest(ckpt: str, marker: str, algo: str) -> dict:
    """The manifest of a checkpoint completed by a marker file (other writers), built at sync time."""
    m = re.search(r"(\d+)$", os.path.basename(ckpt))
    step = int(m.group(1)) if m else 0
    man = mf.build(ckpt, step, algo=algo)
    man["extra"] = {"built_by": "slurmkit sync", "marker": marker}
    return man


def _symlinks_in(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            if os.path.islink(full):
                out.append(os.path.relpath(full, root))
    return sorted(out)


# --- how: safe opens, the copy engine ------------------------------------------------------------------------

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


def _copy_fd(sfd: int, dfd: int, size: int, deadline: float | None, progress, chunk: int = COPY_CHUNK,
             on_chunk=None) -> None:
    """Copy size bytes (kernel copy_file_range, else pread/pwrite); on_chunk(end offset) after each chunk."""
    off = 0
    use_cfr = hasattr(os, "copy_file_range")
    while off < size:
        if deadline is not None and time.monotonic() > deadline:
            raise Deferred()
        n = min(chunk, size - off)
        got = 0
        if use_cfr:
            try:
                got = os.copy_file_range(sfd, dfd, n, off, off)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                use_cfr = False
        if not use_cfr:
            buf = os.pread(sfd, n, off)
            got = len(buf)
            view = memoryview(buf)
            w = 0
            while w < got:
                w += os.pwrite(dfd, view[w:], off + w)
        if got == 0:
            raise SyncError("source file shrank while copying")
        off += got
        if on_chunk:
            on_chunk(off)
        if progress:
            progress(got)


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


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the kernel or filesystem can't."""
    try:
        libc = _libc()
        return libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
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


def run_parallel(fn, items: list, workers: int) -> None:
    """fn(item) for each item on `workers` threads (copying and hashing release the GIL); the first error is
    raised after all have stopped, a budget deferral before any other error."""
    if workers <= 1 or len(items) <= 1:
        for it in items:
            fn(it)
        return
    from concurrent.futures import ThreadPoolExecutor  # preloaded before a privilege drop
    errs: list[BaseException] = []
    with ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(fn, it) for it in items]
        for fu in futs:
            if fu.cancelled():
                continue
            try:
                fu.result()
            except (Deferred, SyncError, OSError) as e:
                errs.append(e)
                for other in futs:
                    other.cancel()
            except Exception as e:  # noqa: BLE001 - e.g. a botocore error on one part
                errs.append(SyncError(f"{type(e).__name__}: {e}"))
                for other in futs:
                    other.cancel()
    for e in errs:
        if isinstance(e, Deferred):
            raise e
    if errs:
        raise errs[0]


def _hash_behind(rfd: int, algo: str, ranges: "queue.Queue", out: list, writeback: bool = False) -> None:
    """Hash rfd from offset 0 up to each end offset taken from `ranges` (None: done); append (size, hex)."""
    h = hashlib.new(algo)
    buf = bytearray(mf.CHUNK)
    view = memoryview(buf)
    off = size = 0
    try:
        while True:
            end = ranges.get()
            if end is None:
                break
            start = off
            while off < end:
                n = os.preadv(rfd, [view[:min(len(buf), end - off)]], off)
                if n <= 0:
                    break  # end of file
                h.update(view[:n])
                off += n
                size += n
            if writeback and off > start:
                _start_writeback(rfd, start, off - start)
        out.append((size, h.hexdigest()))
    except BaseException as e:  # noqa: BLE001 - handed to the copying thread
        out.append(e)
        while ranges.get() is not None:  # let the copier finish putting
            pass


def _copy_verify(sfd: int, dfd: int, size: int, algo: str, deadline, progress) -> tuple[int, str]:
    """Copy sfd to dfd and return (size, hash) of what reads back from the destination. A large file is hashed
    by a second thread right behind the copy (hashing and copying overlap); a small one after its copy."""
    rfd = os.open(f"/proc/self/fd/{dfd}", os.O_RDONLY)  # a read handle on the very file we write
    try:
        if size <= 2 * VERIFY_CHUNK:
            _copy_fd(sfd, dfd, size, deadline, progress)
            ranges: queue.Queue = queue.Queue()
            ranges.put(size + 1)
            ranges.put(None)
            out: list = []
            _hash_behind(rfd, algo, ranges, out)
        else:
            ranges = queue.Queue()
            out = []
            t = threading.Thread(target=_hash_behind, args=(rfd, algo, ranges, out, True), daemon=True)
            t.start()
            try:
                _copy_fd(sfd, dfd, size, deadline, progress, chunk=VERIFY_CHUNK, on_chunk=ranges.put)
                ranges.put(size + 1)  # and anything beyond: a file longer than the manifest says fails
            finally:
                ranges.put(None)
                t.join()
    finally:
        os.close(rfd)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


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
            if name.startswith(".") or os.path.islink(p) or not os.path.isdir(p):
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


def make_dest(loc: str, settings=None):
    if loc.startswith("s3://"):
        from .s3 import S3Dest  # boto3 only for s3:// destinations
        return S3Dest(loc, settings)
    return FsDest(loc)


def empty_report(source: str = "", dest: str = "") -> dict:
    return {"status": "ok", "source": source, "dest": dest, "copied": [], "skipped": [], "pruned": [],
            "deferred": [], "incomplete": [], "refused": [], "cleaned": [], "bytes": 0, "seconds": 0.0,
            "errors": []}


def sync_dir(source: str, dest: str, *, keep: int, marker: str | None = None, algo: str = mf.DEFAULT_ALGO,
             deadline: float | None = None, workers: int = 2, dry_run: bool = False, progress=None,
             on_total=None, settings=None) -> dict:
    """Sync the complete checkpoints of `source` to `dest` (a path or s3://...) as the CALLING user.
    Returns the report; never raises for a problem with one checkpoint (it goes into report['errors'])."""
    t0 = time.monotonic()
    rep = empty_report(source, dest)
    try:
        src_ckpts, rep["incomplete"] = scan_source(source, marker)
        d = make_dest(dest, settings)
        d.prepare(dry_run)
        if not dry_run:
            d.lock(deadline)
        try:
            dst_ckpts, _, _ = d.scan()
            p = plan(src_ckpts, dst_ckpts, keep)
            rep["skipped"] = p["skip"]
            if on_total:
                on_total(sum(f["size"] for n in p["copy"] if isinstance(src_ckpts[n], dict)
                             for f in src_ckpts[n]["files"]))
            if dry_run:
                rep.update(copy=p["copy"], prune=p["prune"], status="dry-run")
                rep["would_copy_bytes"] = sum(f["size"] for n in p["copy"] if isinstance(src_ckpts[n], dict)
                                              for f in src_ckpts[n]["files"])
                return rep
            rep["cleaned"] = d.cleanup(p["copy"])
            todo = list(p["copy"])
            while todo:
                name = todo[0]
                ck = os.path.join(source, name)
                try:
                    man = src_ckpts[name]
                    if man == "marker":
                        rep["refused"] += [f"{name}/{s}" for s in _symlinks_in(ck)]
                        man = build_marker_manifest(ck, marker, algo)
                        if _same(man, dst_ckpts.get(name)):
                            rep["skipped"].append(name)
                            todo.pop(0)
                            continue
                    rep["bytes"] += d.publish(ck, name, man, deadline=deadline, workers=workers,
                                              progress=progress)
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
                    except OSError as e:
                        rep["errors"].append(f"prune {name}: {e}")
        finally:
            if not dry_run:
                d.unlock()
    except Deferred:
        rep["deferred"].append("*")
    except (SyncError, OSError) as e:
        rep["errors"].append(str(e))
    rep["seconds"] = round(time.monotonic() - t0, 3)
    rep["status"] = "failed" if rep["errors"] else ("partial" if rep["deferred"] else rep["status"])
    return rep


# --- as whom: a forked child that drops to the job's user --------------------------------------------------------

def drop_privileges(uid: int, gid: int, user: str) -> None:
    groups = os.getgrouplist(user, gid)
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise SyncError("privilege drop failed: could regain root")
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != gid:
        raise SyncError("privilege drop failed")


def preload(dest: str, settings: SyncSettings | None = None) -> None:
    """Import (and set up) everything the dropped child needs while it is still root: after the drop, the
    interpreter's own files may be unreadable (a Python under /root), and root never reads user files anyway."""
    import concurrent.futures.thread  # noqa: F401
    import ctypes  # noqa: F401 - syncfs
    import dataclasses  # noqa: F401

    import yaml  # noqa: F401 - the job file

    from .. import config  # noqa: F401
    if dest.startswith("s3://"):
        from . import s3
        s3.client(settings)


def run_as(identity: tuple[int, int, str] | None, fn, *args, timeout: float | None = None, before=None,
           **kw) -> dict:
    """Run fn(*args, **kw) -> dict in a forked child as `identity` (uid, gid, user); None = as we are, in this
    process. `before()` runs in the child before the drop (imports). The child dies at `timeout` seconds
    (SIGKILL) if it has not answered."""
    if identity is None:
        if before:
            before()
        return fn(*args, **kw)
    uid, gid, user = identity
    if os.geteuid() != 0 and os.geteuid() != uid:
        raise SyncError(f"only root can sync as another user ({user})")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if before:
                before()
            if os.geteuid() == 0:
                drop_privileges(uid, gid, user)
            os.environ["HOME"] = _home(uid)
            os.environ["USER"] = os.environ["LOGNAME"] = user
            out = fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 - the child reports everything, then exits
            out = {"errors": [f"{type(e).__name__}: {e}"], "status": "failed"}
            code = 1
        try:
            data = json.dumps(out, default=str).encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(code)
    os.close(w)
    chunks, end = [], (time.monotonic() + timeout) if timeout else None
    killed = False
    try:
        while True:
            wait = None if end is None else max(0.0, end - time.monotonic())
            ready, _, _ = select.select([r], [], [], wait)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            b = os.read(r, 1 << 16)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if killed:
        return {"status": "partial", "errors": [], "killed": True, "deferred": ["*"]}
    try:
        return json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {"status": "failed", "errors": ["sync child died without a report"]}


def _home(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"


# --- a job's narrowing file (read as the user) ----------------------------------------------------------------

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
    from dataclasses import dataclass

    from ..config import parse_yaml

    @dataclass
    class JobSync:
        enabled: bool = True
        keep: int | None = None
        subdir: str | None = None

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


def _job_sync(source: str, dest: str, cfg: SyncSettings, deadline: float | None) -> dict:
    """Runs in the dropped child: read the job file, narrow, sync."""
    try:
        job = read_job_file(source, cfg.job_file) if os.path.isdir(source) else {}
    except SyncError as e:
        rep = empty_report(source, dest)
        rep.update(status="failed", errors=[f"job file: {e}"])
        return rep
    if job.get("enabled") is False:
        rep = empty_report(source, dest)
        rep["status"] = "disabled-by-job"
        return rep
    keep = min(cfg.keep, job.get("keep", cfg.keep))
    if job.get("subdir"):
        dest = dest.rstrip("/") + "/" + job["subdir"]
    return sync_dir(source, dest, keep=keep, marker=cfg.marker, algo=cfg.algo, deadline=deadline,
                    workers=cfg.workers, settings=cfg)


# --- the entry point the epilog calls ------------------------------------------------------------------------

def sync_for_job(settings: Settings, environ: dict[str, str], *, budget: float | None = None, background: bool | None = None,
                 context: str = "sync") -> dict:
    """Sync the job's checkpoints as the epilog would: resolve source/dest from the site config and the job's
    variables, run as the job's user within the budget, hand the rest to a background sync, log the outcome.
    Never raises; returns the report (status ok | partial | failed | disabled | nothing | ...)."""
    t0 = time.monotonic()
    cfg = settings.sync
    rep = empty_report()
    if not cfg.enabled:
        rep["status"] = "disabled"
        return rep
    job_id = environ.get("SLURM_JOB_ID")
    environ = with_job_record(environ, (cfg.source, cfg.dest), timeout=settings.slurm.timeout)
    try:
        source = expand(cfg.source, environ, "source")
        dest = expand(cfg.dest, environ, "dest")
        rep.update(source=source, dest=dest)
    except SyncError as e:
        rep.update(status="failed", errors=[str(e)])
        _log(settings, rep, job_id, context, None)
        return rep
    try:
        identity = job_identity(environ) if os.geteuid() == 0 else None
    except SyncError as e:
        if environ.get("SLURM_JOB_UID") == "0" and not os.path.lexists(source):
            # a root job (admin tests, health jobs) with nothing to sync: no record on every node, as for any
            # job without checkpoints. (Its source is a path of the job's own user, root: stat-ing it is safe.)
            rep["status"] = "nothing"
            return rep
        rep.update(status="failed", errors=[str(e)])
        _log(settings, rep, job_id, context, None)
        return rep
    budget = cfg.budget if budget is None else budget
    margin = min(2.0, budget * 0.1)
    deadline_in = None if budget == float("inf") else budget - margin
    rep = run_as(identity, _job_sync_rel, source, dest, cfg, deadline_in,
                 timeout=None if deadline_in is None else budget,
                 before=lambda: preload(dest, cfg))
    rep.setdefault("source", source)
    rep.setdefault("dest", dest)
    for k, v in empty_report().items():
        rep.setdefault(k, v)
    bg = cfg.background if background is None else background
    if rep.get("deferred"):
        if bg:
            rep["background_pid"] = _spawn_background(settings, environ)
            rep["finish"] = "background"
        else:
            rep["finish"] = f"manual: slurmkit sync {source} {dest}"
    if rep["status"] == "ok" and not rep["copied"] and not rep["skipped"] and not rep["incomplete"]:
        rep["status"] = "nothing"
    rep["seconds"] = round(time.monotonic() - t0, 3)
    if rep["status"] != "nothing":  # a job without checkpoints leaves no record on every node
        _log(settings, rep, job_id, context, rep.get("finish"))
    return rep


def _job_sync_rel(source: str, dest: str, cfg: SyncSettings, deadline_in: float | None) -> dict:
    deadline = None if deadline_in is None else time.monotonic() + deadline_in
    return _job_sync(source, dest, cfg, deadline)


def _spawn_background(settings, environ) -> int | None:
    from .. import proc
    env = {k: environ[k] for k in VARIABLES if environ.get(k)}
    env["SLURM_JOB_UID"] = environ.get("SLURM_JOB_UID", "")
    for k in ("SLURMKIT_CONFIG", "PATH", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
              "PYTHONPATH"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    if getattr(settings, "source", None):
        env["SLURMKIT_CONFIG"] = settings.source
    log = None
    state = getattr(settings.paths, "state_dir", None)
    if state:
        try:
            os.makedirs(state, exist_ok=True)
            log = os.path.join(state, "sync-background.log")
        except OSError:
            log = None
    try:
        return proc.spawn_detached([sys.executable, "-m", "slurmkit.checkpoint.sync", "background"], env=env,
                                   log=log)
    except OSError:
        return None


def _log(settings, rep: dict, job_id, context: str, finish) -> None:
    from .. import healthlog
    status = {"ok": "ok", "nothing": "ok", "partial": "warn", "disabled-by-job": "skip"}.get(rep["status"], "fail")
    if rep.get("deferred"):
        action = "deferred-background" if finish == "background" else "deferred-manual"
    elif rep["copied"] or rep["pruned"]:
        action = "copied"
    else:
        action = "none"
    reason = "; ".join(rep["errors"])[:500] if rep["errors"] else ""
    if rep.get("deferred") and not reason:
        reason = f"budget spent; {len(rep['deferred'])} checkpoint(s) left for {finish}"
    evidence = {k: rep.get(k) for k in ("source", "dest", "copied", "skipped", "pruned", "deferred", "incomplete",
                                         "refused", "bytes", "seconds", "background_pid", "finish", "killed")
                if rep.get(k) not in (None, [], "")}
    try:
        jid = int(job_id) if job_id else None
    except ValueError:
        jid = None
    try:
        healthlog.append(settings.paths.health_log, healthlog.record(
            check="checkpoint-sync", status=status, reason=reason, evidence=evidence, context="sync",
            job_id=jid, action=action, phase=context))
    except OSError:
        pass


def _main(argv: list[str]) -> int:
    """`python -m slurmkit.checkpoint.sync background`: the detached finish of an epilog's sync."""
    if argv[:1] != ["background"]:
        print("usage: python -m slurmkit.checkpoint.sync background", file=sys.stderr)
        return 2
    from .. import config
    settings = config.load()
    rep = sync_for_job(settings, dict(os.environ), budget=float("inf"), background=False,
                       context="sync-background")
    print(json.dumps(rep))
    return 0 if rep["status"] in ("ok", "nothing", "disabled") else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
