"""Bounded hostlists: `n[001-128]` through ClusterShell's NodeSet, after its size is known from the text alone.

ClusterShell builds every name of a range as it parses it (`n[1-99999999]` is 100 million strings, gigabytes),
so `len(NodeSet(...))` is too late to bound anything: `count()` reads the size off the brackets first (linear in
the text, no names made), and `expand()` / `contains()` refuse an expression over `limit` names with a message
that names the limit. Group names (`@gpu`) are refused: resolving them may run the site's group commands.
Per-node settings stay patterns (`gpu_count.per_node: {"n[1-64]": 8}`); `contains` answers "is this node in it".
"""

from __future__ import annotations

import re

from .errors import UsageError

DEFAULT_LIMIT = 100_000
_MAX_DIGITS = 18  # a node index longer than this is not a node index
_RANGE = re.compile(r"([0-9]{1,%d})(?:-([0-9]{1,%d}))?(?:/([0-9]{1,%d}))?" % ((_MAX_DIGITS,) * 3), re.ASCII)  # noqa: UP031 - {} is regex syntax


_OUTSIDE_COMMA = re.compile(r",(?![^\[\]]*\])")  # a comma not followed by a `]` before any `[`


class HostlistError(UsageError):
    """A hostlist we will not expand: malformed, or over the limit. `.expr` is the expression."""

    def __init__(self, message: str, expr: str, **kw):
        super().__init__(message, **kw)
        self.expr = expr


def _top_level(expr: str) -> list[str]:
    """Split at commas outside brackets: 'a[1,2],b' -> ['a[1,2]', 'b']."""
    return _OUTSIDE_COMMA.split(expr)


def count(expr: str) -> int:
    """How many names `expr` stands for, read off its brackets (an upper bound where ranges overlap). Raises
    HostlistError for what is not a plain hostlist (groups, set operators, bad ranges)."""
    if any(c in expr for c in "@!&^*"):
        raise HostlistError(
            f"bad hostlist {expr!r}: only names and [ranges] are accepted (no @groups or set operators)", expr
        )
    total = 0
    for part in _top_level(expr.strip()):
        part = part.strip()
        if not part:
            continue
        n = 1
        pos = 0
        for m in re.finditer(r"\[([^\[\]]*)\]", part):
            pos = m.end()
            k = 0
            for item in m.group(1).split(","):
                r = _RANGE.fullmatch(item.strip())
                if not r:
                    raise HostlistError(
                        f"bad hostlist {expr!r}: {item.strip()!r} is not a range like 1-8 (at "
                        f"most {_MAX_DIGITS} digits)",
                        expr,
                    )
                lo = int(r.group(1))
                hi = int(r.group(2)) if r.group(2) else lo
                step = int(r.group(3)) if r.group(3) else 1
                if hi < lo or step < 1:
                    raise HostlistError(f"bad hostlist {expr!r}: range {item.strip()!r} is empty", expr)
                k += (hi - lo) // step + 1
            n *= k
        if "[" in part[pos:] or "]" in part[pos:] or part.count("[") != part.count("]"):
            raise HostlistError(f"bad hostlist {expr!r}: unbalanced brackets", expr)
        total += n
    return total


def nodeset(expr: str, *, limit: int = DEFAULT_LIMIT):
    """ClusterShell NodeSet for `expr`, refused before it is built when it would hold more than `limit` names."""
    n = count(expr)
    if n > limit:
        raise HostlistError(f"hostlist {expr[:80]!r} stands for {n} names, over the limit of {limit}", expr)
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

    try:
        return NodeSet(expr, resolver=RESOLVER_NOGROUP)
    except (NodeSetParseError, ValueError) as e:
        raise HostlistError(f"bad hostlist {expr!r}: {e}", expr) from None


def expand(expr: str, *, limit: int = DEFAULT_LIMIT) -> list[str]:
    """'n[001-003],gpu7' -> ['n001', 'n002', 'n003', 'gpu7'], at most `limit` names."""
    return list(nodeset(expr, limit=limit))


def contains(expr: str, node: str, *, limit: int = DEFAULT_LIMIT) -> bool:
    """Is `node` one of the names of the pattern `expr` (a per-node config key)?"""
    return node in nodeset(expr, limit=limit)
