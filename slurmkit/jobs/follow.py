"""Follow a job's output file until the job ends (`slurmkit logs -f`): new bytes as they come, Slurm asked about
the job every few seconds, bounded by a maximum wait."""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Callable

from .handle import Job, tail_lines

CHUNK = 1 << 16


def follow_output(
    job: Job,
    path: str,
    lines: int,
    max_wait: float,
    *,
    write: Callable[[str], object],
    flush: Callable[[], object] = lambda: None,
    poll: float = 0.5,
    state_every: float = 3.0,
) -> bool:
    """Print the last `lines` lines of `path`, then what is appended, until the job ends (True; the file is read
    to its end once more) or `max_wait` seconds pass (False). The file may appear later (a pending job)."""
    for line in tail_lines(path, lines):
        write(line + "\n")
    flush()
    try:
        offset = os.stat(path).st_size
    except FileNotFoundError:
        offset = 0
    deadline = time.monotonic() + max_wait
    next_state = 0.0
    ended = False
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character split across two reads stays whole
    while True:
        offset = _copy_new(path, offset, lambda b: write(decoder.decode(b)))
        flush()
        if ended:
            return True
        now = time.monotonic()
        if now >= next_state:
            ended = job.done()
            next_state = now + state_every
            if ended:
                continue  # read what the job wrote last
        if now >= deadline:
            return False
        time.sleep(poll)


def _copy_new(path: str, offset: int, write: Callable[[bytes], object]) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return offset
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < offset:  # truncated: start again
            offset = 0
        f.seek(offset)
        while True:
            data = f.read(CHUNK)
            if not data:
                break
            write(data)
            offset += len(data)
    return offset
