"""Regexes compiled on first use: `lazyre.compile(pattern, flags)` in place of `re.compile` at module level.

The prolog and epilog start a fresh interpreter on every node for every job, and `re` has no cache across
processes: each module-level `re.compile` is paid on every job whether or not a line ever reaches that pattern
(the kernel-log signatures, the Xid grading rules: tens of milliseconds a job, most of them for patterns a
healthy node never uses). A lazy pattern compiles on the first attribute used other than `pattern`/`flags`;
from then on its methods are the compiled pattern's own, read from a slot (no per-call indirection). A bad
pattern raises re.error on first use, so a module's patterns are compiled by the unit tests (tests/unit/
test_lazyre.py compiles every lazy pattern the package defines).
"""

from __future__ import annotations

import re

_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "groupindex", "groups")
ALL: list[LazyPattern] = []  # every lazy pattern made, for the test that compiles them all


class LazyPattern:
    __slots__ = ("pattern", "flags", "_rx", *_METHODS)

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags | (re.UNICODE if isinstance(pattern, str) and not flags & re.ASCII else 0)
        self._rx: re.Pattern | None = None

    def compiled(self) -> re.Pattern:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self.pattern, self.flags)
            for name in _METHODS:
                setattr(self, name, getattr(rx, name))
        return rx

    def __getattr__(self, name: str):  # only for a slot not yet set: the first use
        if name not in _METHODS:
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"lazyre.compile({self.pattern!r})"


def compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    p = LazyPattern(pattern, flags)
    ALL.append(p)
    return p  # type: ignore[return-value]  # it acts as one (its methods are the compiled pattern's)


def source(p) -> str:
    """The pattern text of a compiled, lazy or plain-string pattern."""
    return p if isinstance(p, str) else p.pattern
