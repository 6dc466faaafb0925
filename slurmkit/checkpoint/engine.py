"""The copy engine: copy a file (copy_file_range, else pread/pwrite) while a second thread hashes what
reads back from the destination right behind it; run copies on a few threads, the first error wins."""

from __future__ import annotations

import errno
import hashlib
import os
import queue
import threading
import time

from . import manifest as mf
from .report import Deferred, SyncError
from .safeio import _start_writeback

COPY_CHUNK = 64 << 20


VERIFY_CHUNK = 16 << 20  # large files: copy in these steps, hashed right behind


def _copy_fd(
    sfd: int, dfd: int, size: int, deadline: float | None, progress, chunk: int = COPY_CHUNK, on_chunk=None
) -> None:
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
    for err in errs:
        if isinstance(err, Deferred):
            raise err
    if errs:
        raise errs[0]


def _hash_behind(rfd: int, algo: str, ranges: queue.Queue, out: list, writeback: bool = False) -> None:
    """Hash rfd from offset 0 up to each end offset taken from `ranges` (None: done); append (size, hex)."""
    done = False
    try:
        h = hashlib.new(algo)
        buf = bytearray(mf.CHUNK)
        view = memoryview(buf)
        off = size = 0
        while True:
            end = ranges.get()
            if end is None:
                done = True
                break
            start = off
            while off < end:
                n = os.preadv(rfd, [view[: min(len(buf), end - off)]], off)
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
        while not done and ranges.get() is not None:  # let the copier finish putting (once: never past its end)
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
