"""One cell of nvidia-smi / dcgmi output -> a number or None, and the text that says why it is None."""

from __future__ import annotations

import re

from ..errors import UsageError

# values the tools print instead of a number: a value to handle, never a crash and never a 0
MISSING = {
    "[n/a]": "N/A",
    "n/a": "N/A",
    "[not supported]": "not supported",
    "not supported": "not supported",
    "err!": "ERR!",
    "[err!]": "ERR!",
    "[unknown error]": "Unknown Error",
    "unknown error": "Unknown Error",
    "-": "-",
    "[not found]": "not found",
    "[insufficient permissions]": "insufficient permissions",
    "[gpu is lost]": "GPU is lost",
    "gpu is lost": "GPU is lost",
    "[requires root]": "requires root",
}
UNITS = ("%", "MiB", "W", "MHz", "C", "KiB", "GiB", "us", "ms")
_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def missing(cell: str) -> str | None:
    """'N/A', 'ERR!', ... when the cell is one of the tools' placeholders, else None."""
    return MISSING.get(cell.strip().lower())


def split_unit(cell: str) -> tuple[str, str | None]:
    """'74709 MiB' -> ('74709', 'MiB'); '98 %' -> ('98', '%'); '33.97' -> ('33.97', None)."""
    c = cell.strip()
    for u in UNITS:
        if c.endswith(u):
            head = c[: -len(u)].rstrip()
            if _NUM.match(head):
                return head, u
    return c, None


# no cell these tools print is negative or larger than this (MiB, W, %, MHz): past it, it is not a measurement
MAX_VALUE = 1e9
PERCENT = 100.0


def _shown(cell: str) -> str:
    c = cell.strip()
    return repr(c) if len(c) <= 40 else f"{c[:20]!r}...({len(c)} characters)"


def number(cell: str, *, path: str, line: int | None, field: str, hi: float = MAX_VALUE) -> float | None:
    """The number in a cell (unit stripped), None for a placeholder; anything else is bad input (exit 2), and so
    is a number outside 0..`hi` (a negative utilisation or power, 5,000 digits that read as infinity): averaged,
    it would make a verdict out of nothing."""
    if missing(cell):
        return None
    v, _ = split_unit(cell)
    if _NUM.match(v):
        x = float(v)
        if not 0.0 <= x <= hi:
            raise UsageError(f"{field}: {_shown(cell)} is out of range (0 to {hi:g})", path=path, line=line)
        return x
    raise UsageError(f"{field}: expected a number, got {_shown(cell)}", path=path, line=line)


def index(cell: str, *, path: str, line: int | None, field: str) -> int:
    """A GPU index or a pid: ASCII digits, at most 9 of them (int() refuses 4,300; '²' is a digit to isdigit)."""
    c = cell.strip()
    if c.isascii() and c.isdigit() and len(c) <= 9:
        return int(c)
    raise UsageError(f"{field}: expected a whole number of at most 9 digits, got {_shown(cell)}", path=path, line=line)


def is_index(cell: str) -> bool:
    c = cell.strip()
    return c.isascii() and c.isdigit() and len(c) <= 9


def is_number(cell: str) -> bool:
    return bool(_NUM.match(split_unit(cell)[0]))


# lines that say the tool could not measure at all: the whole capture is unreadable, say which line
FAILURE = re.compile(
    r"(is not supported|not a valid field|Failed to initialize NVML|No devices were found|"
    r"NVIDIA-SMI has failed|Unable to determine the device handle|Invalid combination|"
    r"Error: |Error connecting to)",
    re.I,
)


def refuse_failure(lines: list[str], path: str) -> None:
    for i, ln in enumerate(lines, 1):
        m = FAILURE.search(ln)
        if m:
            raise UsageError(f"the tool did not measure: {ln.strip()[:160]!r}", path=path, line=i)
