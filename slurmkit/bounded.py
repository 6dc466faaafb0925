"""One bounded reader for every file a user hands slurmkit: captured command output, site config, job specs,
topology profiles. Every input has a size bound (default 64 MiB) and nothing that is not a regular file is read
(a FIFO would block forever, /dev/zero would read until memory runs out). Standard library only: the hooks use it.
"""

from __future__ import annotations

import os
import stat

from .errors import UsageError

DEFAULT_LIMIT = 64 * 1024 * 1024


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def read_bytes(path: str | os.PathLike, *, limit: int = DEFAULT_LIMIT, what: str = "file") -> bytes:
    """The whole content of the regular file `path`, at most `limit` bytes, else a UsageError (exit 2) that
    names the file and the limit. Opens with O_NONBLOCK so a FIFO never blocks the open, then refuses it."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{what} not found", path=p) from None
    except IsADirectoryError:
        raise UsageError(f"{what} is a directory, not a file", path=p) from None
    except OSError as e:
        raise UsageError(f"cannot open {what}: {e.strerror}", path=p) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(st.st_mode)
                else "a device"
                if (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode))
                else "a socket"
                if stat.S_ISSOCK(st.st_mode)
                else "not a regular file"
            )
            raise UsageError(f"{what} is {kind}: only regular files are read", path=p)
        if st.st_size > limit:
            raise UsageError(f"{what} is {st.st_size} bytes, over the limit of {_human(limit)}", path=p)
        chunks = []
        total = 0
        while True:
            b = os.read(fd, min(1 << 20, limit + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:  # it grew while we read it
                raise UsageError(f"{what} is over the limit of {_human(limit)}", path=p)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(
    path: str | os.PathLike, *, limit: int = DEFAULT_LIMIT, what: str = "file", errors: str = "replace"
) -> str:
    """read_bytes, decoded as UTF-8 (undecodable bytes replaced by default: captured logs hold such bytes)."""
    return read_bytes(path, limit=limit, what=what).decode("utf-8", errors)
