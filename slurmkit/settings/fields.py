"""What every settings section is made of: a keyword-only record (slurmkit/record.py) whose numeric fields carry
their valid range (`num(default, lo, hi)`, kept in the field's metadata as a `Range`), checked whenever a section
is made."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import RangeError
from ..record import MISSING, Record, field, fields

if TYPE_CHECKING:
    from typing import Any


class Range:
    """A closed-or-open interval of valid numbers: lo/hi None = unbounded on that side (but always finite)."""

    __slots__ = ("lo", "hi", "lo_open", "hi_open")

    def __init__(
        self, lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False
    ) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    def __contains__(self, v: object) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        if self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi):
            return False
        return True

    def __str__(self) -> str:
        def fmt(x: float) -> str:
            return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)

        lo = "-inf" if self.lo is None else fmt(self.lo)
        hi = "inf" if self.hi is None else fmt(self.hi)
        return f"{'(' if self.lo_open or self.lo is None else '['}{lo}, {hi}{')' if self.hi_open or self.hi is None else ']'}"


def num(
    default: Any = MISSING,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    default_factory: Any = MISSING,
) -> Any:
    """A numeric field (or a list/dict of numbers: the range applies to each item/value) with its valid range."""
    md = {"range": Range(lo, hi, lo_open, hi_open)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=md)
    return field(default=default, metadata=md)


def _fmt(v: object) -> str:
    return repr(v) if not isinstance(v, float) else ("nan" if math.isnan(v) else repr(v))


def check_ranges(obj: Record) -> None:
    """Raise RangeError for the first numeric field of the record `obj` outside its range (None passes:
    an optional setting left unset). NaN/inf are refused wherever a number is expected."""
    for f in fields(obj):
        rng = f.metadata.get("range")
        v = getattr(obj, f.name)
        if rng is None:
            if isinstance(v, float) and not math.isfinite(v):
                raise RangeError(f.name, f"expected a finite number, got {_fmt(v)}")
            continue
        items: list[tuple[str, object]]
        if isinstance(v, dict):
            items = [(f"{f.name}.{k}", x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)):
            items = [(f"{f.name}[{i}]", x) for i, x in enumerate(v)]
        else:
            items = [(f.name, v)]
        for key, x in items:
            if x is None or x in rng:
                continue
            what = "an integer" if isinstance(x, int) and not isinstance(x, bool) else "a number"
            raise RangeError(key, f"expected {what} in {rng}, got {_fmt(x)}")


class Section(Record):
    """Base of every settings section (a keyword-only record): numeric ranges checked when it is made."""

    def __post_init__(self) -> None:
        check_ranges(self)


def _check_signal(name: str, what: str, allow_none: bool = False) -> None:
    from ..signals import is_name

    if allow_none and name.strip().upper() in ("NONE", ""):
        return
    if not is_name(name):
        raise ValueError(f"{what}: unknown signal {name!r} (e.g. USR2, TERM, INT{', none' if allow_none else ''})")


TRIGGER_FORBIDDEN = ("TERM", "INT", "KILL", "STOP", "CONT", "CHLD", "HUP", "QUIT")
DAY = 86400.0
