"""The copy engine: copy files (copy_file_range, else pread/pwrite) on a few threads while a Verifier hashes what
reads back from the destination on threads of its own; the first error wins.

Where a first sync's time goes (issue 18, the 766 MiB benchmark checkpoint on a 2-core VM): the kernel copy
~0.4 s of CPU, the read-back and sha256 ~0.7 s, and the destination's flush ~0.8-1 s of waiting on the disk
(`cp -r && sync` waits for the same flush). So the copies go first and start each large file's writeback as they
go (sync_file_range); the hashes wait until every copy is done (or the copies run more than VERIFY_LAG bytes or
VERIFY_FILES files ahead: the pages read back are still in the page cache), and the caller starts its syncfs as
soon as the last byte is copied, so the flush and the verification overlap instead of adding up. The manifest is
written only after both (fsdest._fill)."""

from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
from collections import deque

from . import manifest as mf
from .report import Deferred, SyncError
from .safeio import _start_writeback

COPY_CHUNK = 64 << 20
VERIFY_CHUNK = 16 << 20  # large files (over 2 chunks): copied in these steps, each step's writeback started at once
VERIFY_LAG = 1 << 30  # bytes copied and not yet hashed, at most: past it the copies wait for the hashes
VERIFY_FILES = 64  # files copied and not yet hashed, at most (each holds a read handle until it is hashed)


def _copy_fd(
    sfd: int, dfd: int, size: int, deadline: float | None, progress, chunk: int = COPY_CHUNK, on_chunk=None
) -> None:
    """Copy size bytes (kernel copy_file_range, else pread/pwrite); on_chunk(start, end) after each chunk."""
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
        if on_chunk:
            on_chunk(off, off + got)
        off += got
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


class _Job:
    """One file to hash: its read handle, how far the copy has written it, how far it is hashed, the result."""

    __slots__ = ("rfd", "algo", "published", "hashed", "closed", "dead", "result")

    def __init__(self, rfd: int, algo: str) -> None:
        self.rfd, self.algo = rfd, algo
        self.published = self.hashed = 0  # bytes the copy has written; bytes of those hashed
        self.closed = False  # the copy is done: hash to the end of the file (and one byte past it)
        self.dead = False  # the hash failed or was stopped: nothing more to wait for
        self.result: tuple[int, str] | BaseException | None = None


class Verifier:
    """Hashes what the copies wrote, read back from the destination, on `threads` threads of its own, files in
    the order their copies started. With as many threads as copy workers this cannot deadlock: a copy waits only
    on a backlog, and the oldest unfinished files are always the ones being hashed. Use: job = start(rfd, algo);
    publish(job, end) as the copy goes; close(job) when it is done (also on failure); copies_done(); finish();
    then each job.result is (size, hex digest) or the exception its hash raised."""

    def __init__(self, threads: int, *, lag: int | None = None, files: int | None = None) -> None:
        self._cv = threading.Condition()
        self._queue: deque[_Job] = deque()  # started, not yet taken by a hash thread
        self._pending = 0  # jobs started and not yet hashed
        self._backlog = 0  # bytes published and not yet hashed
        self._lag = VERIFY_LAG if lag is None else lag
        self._files = VERIFY_FILES if files is None else files
        self._copying = True  # hashes wait while copies run, unless pressed
        self._no_more = False  # finish() was called: drain the queue, then stop
        self._stop = False  # abort: stop hashing, close what is left
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(max(1, threads))]
        for t in self._threads:
            t.start()

    def start(self, rfd: int, algo: str) -> _Job:
        """A new file to hash (the verifier closes rfd); waits while VERIFY_FILES files are pending."""
        job = _Job(rfd, algo)
        with self._cv:
            while self._pending >= self._files and not self._stop:
                self._cv.wait()
            self._pending += 1
            self._queue.append(job)
            self._cv.notify_all()
        return job

    def publish(self, job: _Job, end: int, deadline: float | None = None) -> None:
        """The copy has written the file up to `end`; waits (raising Deferred past the deadline) while the
        backlog is over VERIFY_LAG bytes."""
        with self._cv:
            if not job.dead:
                self._backlog += end - job.published
            job.published = end
            self._cv.notify_all()
            while self._backlog > self._lag and not self._stop:
                if deadline is not None and time.monotonic() > deadline:
                    raise Deferred()
                self._cv.wait(0.5)

    def close(self, job: _Job) -> None:
        with self._cv:
            job.closed = True
            self._cv.notify_all()

    def copies_done(self) -> None:
        """Every copy has finished: hash the rest at full speed."""
        with self._cv:
            self._copying = False
            self._cv.notify_all()

    def finish(self, abort: bool = False) -> None:
        """Wait for every hash to end (abort: stop them where they are); every read handle is closed after."""
        with self._cv:
            self._copying = False
            self._no_more = True
            self._stop = self._stop or abort
            self._cv.notify_all()
        for t in self._threads:
            t.join()

    def _pressed(self) -> bool:
        return self._backlog >= self._lag or self._pending >= self._files

    def _run(self) -> None:
        buf = bytearray(mf.CHUNK)
        view = memoryview(buf)
        while True:
            with self._cv:
                while not (self._queue and (not self._copying or self._stop or self._pressed())):
                    if self._no_more and not self._queue:
                        return
                    self._cv.wait()
                job = self._queue.popleft()
            try:
                job.result = self._hash(job, view)
            except BaseException as e:  # noqa: BLE001 - the caller raises it
                job.result = e
            finally:
                os.close(job.rfd)
                with self._cv:
                    job.dead = True
                    self._backlog -= job.published - job.hashed  # whatever was not hashed is not waited for
                    self._pending -= 1
                    self._cv.notify_all()

    def _hash(self, job: _Job, view: memoryview) -> tuple[int, str]:
        h = hashlib.new(job.algo)
        off = 0
        while True:
            with self._cv:
                while off >= job.published and not job.closed and not self._stop:
                    self._cv.wait()
                if self._stop:
                    raise Deferred()
                end, closed = job.published, job.closed
            if off >= end:  # closed, all of it hashed: one byte past the end makes a longer file fail
                end += 1
            while off < end:
                n = os.preadv(job.rfd, [view[: min(len(view), end - off)]], off)
                if n <= 0:
                    break  # end of file
                h.update(view[:n])
                off += n
                with self._cv:
                    step = min(off, job.published) - job.hashed
                    if step > 0:
                        job.hashed += step
                        self._backlog -= step
                        self._cv.notify_all()
            if closed and off >= job.published:
                return off, h.hexdigest()


def copy_to(verifier: Verifier, sfd: int, dfd: int, size: int, algo: str, deadline, progress) -> _Job:
    """Copy sfd to dfd, starting the writeback of a large file's steps as they are copied, and hand what
    reads back from dfd to the verifier (job.result once verifier.finish() returns)."""
    rfd = os.open(f"/proc/self/fd/{dfd}", os.O_RDONLY)  # a read handle on the very file we write
    job = verifier.start(rfd, algo)
    try:
        if size <= 2 * VERIFY_CHUNK:
            _copy_fd(sfd, dfd, size, deadline, progress)
            verifier.publish(job, size, deadline)
        else:

            def step(start: int, end: int) -> None:
                _start_writeback(dfd, start, end - start)
                verifier.publish(job, end, deadline)

            _copy_fd(sfd, dfd, size, deadline, progress, chunk=VERIFY_CHUNK, on_chunk=step)
    finally:
        verifier.close(job)
    return job


def _copy_verify(sfd: int, dfd: int, size: int, algo: str, deadline, progress) -> tuple[int, str]:
    """Copy sfd to dfd and return (size, hash) of what reads back from the destination (one file, start to end)."""
    v = Verifier(1)
    try:
        job = copy_to(v, sfd, dfd, size, algo, deadline, progress)
    except BaseException:
        v.finish(abort=True)
        raise
    v.finish()
    if isinstance(job.result, BaseException):
        raise job.result
    assert job.result is not None
    return job.result
