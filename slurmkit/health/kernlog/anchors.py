"""Literal anchors of regexes: strings one of which every match of a pattern contains, so a log can be cut down to
the lines holding one of them with C string searches before any per-line regex. Derived from the compiled patterns
(the signature data, the Xid patterns, a site's own signatures), never a hand list: a pattern with no literal anchor
(it can match text without any fixed string, or it ignores case) yields None, and then every line is a candidate."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

try:  # the regex parser the re module itself uses
    from re import _constants as _c, _parser as _p  # type: ignore[attr-defined]  # Python >= 3.11, private
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef,unused-ignore]
    import sre_parse as _p  # type: ignore[no-redef,unused-ignore]

_MIN = 3  # shorter literals ("a", "GP") would make every line a candidate


def _options(items, split: bool = False) -> list[frozenset]:
    """Alternative anchor sets of a parsed sequence: each set is one way to say "a match contains one of these".
    split: a literal run gives one option per space-free piece of it (see pieces())."""
    opts: list[frozenset] = []
    run: list[str] = []

    def flush():
        lit = "".join(run)
        if split:
            opts.extend(frozenset([p]) for p in lit.split() if len(p) >= _MIN)
        elif len(lit) >= _MIN:
            opts.append(frozenset([lit]))
        run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        if op is _c.SUBPATTERN:
            opts.extend(_options(av[-1], split))
        elif op is _c.BRANCH:
            branches = [_best(_options(b, split), split) for b in av[1]]
            found = [b for b in branches if b is not None]
            if len(found) == len(branches):
                opts.append(frozenset().union(*found))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)) and av[0] >= 1:
            opts.extend(_options(av[2], split))
        elif op is getattr(_c, "ATOMIC_GROUP", None):
            opts.extend(_options(av, split))
    flush()
    return opts


def _best(opts: list[frozenset], split: bool = False) -> frozenset | None:
    """The option that cuts most: its shortest literal the longest (split: its weakest piece the best by _score),
    then fewest literals."""
    if not opts:
        return None
    weight: Callable[[str], Any] = _score if split else len
    return max(opts, key=lambda o: (min(map(weight, o)), -len(o)))


def _key(rx: re.Pattern | str) -> tuple:
    """(pattern text, flags without the implied UNICODE) of a pattern given compiled or as text."""
    return (rx, 0) if isinstance(rx, str) else (rx.pattern, rx.flags & ~re.UNICODE)


def options(rx: re.Pattern | str) -> list[frozenset]:
    """Every anchor set found for a pattern ([] when it has none, or it ignores case). The built-in patterns' sets
    come from TABLE (slurmkit/data/kernlog_anchors.json, made by dev/gen_anchors.py and checked against this very
    function by tests/unit/health/kernlog/test_anchors.py): parsing a regex costs more than a hook's whole kernel-log scan."""
    pattern, flags = _key(rx)
    if flags & re.IGNORECASE or isinstance(pattern, bytes):
        return []
    known = table().get((pattern, flags))
    if known is not None:
        return known
    return _parsed(pattern, flags)


def _parsed(pattern: str, flags: int) -> list[frozenset]:
    parsed = _p.parse(pattern, flags)
    if parsed.state.flags & re.IGNORECASE:  # an inline (?i)
        return []
    return _options(parsed)


def computed(rx: re.Pattern | str) -> list[frozenset]:
    """options() without the table (what the table must hold)."""
    pattern, flags = _key(rx)
    if flags & re.IGNORECASE or isinstance(pattern, bytes):
        return []
    return _parsed(pattern, flags)


TABLE_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "data", "kernlog_anchors.json")
_TABLE: dict | None = None


def table() -> dict:
    """(pattern, flags) -> its anchor sets, for the built-in patterns; {} when the file cannot be read (every
    pattern is then parsed, as a site's own signatures always are)."""
    global _TABLE
    if _TABLE is None:
        try:
            with open(TABLE_PATH, encoding="utf-8") as f:
                doc = json.load(f)
            _TABLE = {(p, fl): [frozenset(o) for o in opts] for p, fl, opts in doc["anchors"]}
        except (OSError, ValueError, KeyError, TypeError):
            _TABLE = {}
    return _TABLE


def table_doc(patterns) -> dict:
    """The table file's content for these patterns (dev/gen_anchors.py writes it)."""
    rows = []
    for rx in patterns:
        pattern, flags = _key(rx)
        rows.append([pattern, flags, [sorted(o) for o in computed(rx)]])
    return {
        "about": "literal anchors of slurmkit's built-in kernel-log patterns; generated by dev/gen_anchors.py",
        "anchors": rows,
    }


def needles(rx: re.Pattern | str) -> frozenset | None:
    """Literals one of which every match of rx contains (its most selective anchor set), or None: none known,
    so only the regex can tell."""
    key = _key(rx)
    if key not in _NEEDLES:
        _NEEDLES[key] = _best(options(rx))
    return _NEEDLES[key]


_NEEDLES: dict = {}


def may_match(rx: re.Pattern | str, text: str) -> bool:
    """False only when rx certainly does not match text (none of its needles is in it): the regex need not run
    (nor be compiled)."""
    nd = needles(rx)
    return nd is None or any(n in text for n in nd)


def covered(lit: str, chosen) -> bool:
    return any(g in lit for g in chosen)


def keywords(patterns) -> tuple[str, ...] | None:
    """The fewest literals such that every match of every pattern contains one of them (None: some pattern has no
    anchor, so no line may be skipped). A literal found inside another (NVRM in "NVRM: Xid") covers it."""
    chosen: list[str] = []
    for rx in patterns:
        opts = options(rx)
        if not opts:
            return None
        if any(all(covered(lit, chosen) for lit in o) for o in opts):
            continue
        # prefer the option that adds the fewest new searches, then the one that cuts most
        o = min(opts, key=lambda o: (sum(not covered(lit, chosen) for lit in o), -min(map(len, o))))
        for lit in sorted(o, key=len):
            if not covered(lit, chosen):
                chosen = [g for g in chosen if lit not in g] + [lit]
    return tuple(chosen)


# --- pieces: the most selective anchors, for the native prefilter (kernlog.native) ---------------------------
# A literal with a space may be cut where a continuation line is joined to its message ("...has" / "NVRM: fallen
# off the bus" is joined with one space), so only its space-free pieces are sure to lie within one physical line.
# Which piece cuts most is a guess made once per pattern set, never a question of correctness: the driver's own
# prefixes (on every driver line) and generic log words rank last, then a piece with an inner capital, a digit or
# punctuation ("GSP", "RmInitAdapter", "(Fatal)": rarely part of another word, unlike "init" in "initialized"), then
# the longer piece.
COMMON = frozenset({"NVRM", "NVRM:", "nvidia", "nvidia:", "NVIDIA", "failed", "error", "status", "device", "driver"})


def _score(lit: str) -> tuple:
    marked = any(c.isupper() or c.isdigit() or c in "_-=()[]" for c in lit[1:])
    return (lit not in COMMON, marked, len(lit))


def pieces(patterns) -> tuple[str, ...] | None:
    """Space-free literals such that every match of every pattern contains one of them within one physical line
    (None: some pattern has none, or one holds a replacement character a bad byte decodes to)."""
    chosen: list[str] = []
    for rx in patterns:
        rx = re.compile(rx) if isinstance(rx, str) else rx
        if rx.flags & re.IGNORECASE or isinstance(rx.pattern, bytes):
            return None
        opts = _options(_p.parse(rx.pattern, rx.flags & ~re.UNICODE), True)
        if not opts:
            return None
        if any(all(covered(lit, chosen) for lit in o) for o in opts):
            continue
        o = max(opts, key=lambda o: (min(map(_score, o)), -len(o)))
        for lit in o:
            if not covered(lit, chosen):
                chosen = [g for g in chosen if lit not in g] + [lit]
    if any("\ufffd" in c for c in chosen):
        return None
    return tuple(chosen)
