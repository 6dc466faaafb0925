"""The native prefilter for big kernel logs: one SIMD multi-literal pass in native code (ahocorasick-rs: Rust's
aho-corasick crate, whose leftmost-first search runs the Teddy SIMD prefilter for a few patterns) over the log as
it lies in memory (an mmap: no read() copy), for the most selective pieces of every pattern in use
(anchors.pieces). Around each hit only the grader's window is cut out: back to the line its message starts on, on
through its continuation lines, and burst_lines more each side of a fatal AER line (the burst that names the GPU
below a root port). The windows, joined with burst_lines+1 empty lines between them, are parsed by the same parser
as any log (logline.records with events.keywords()), so verdicts and reasons are those of the whole log: a window
starts and ends where a message starts (logline.continues() is False), and lines far apart stay far apart. Line
numbers are then those of the reduced text: exact within a window, only ordered across windows (no newline count
over the whole file: that pass alone would cost more than the search).

Lines outside every window are never decoded. When the module does not import (no wheel for this platform) the
caller parses the whole log the pure-Python way (events.parse); both give the same events (tests/unit)."""

from __future__ import annotations

from . import logline

MIN_BYTES = 1 << 20  # smaller logs: the pure-Python prefilter is as fast, and this import is skipped
CHUNK = 8 << 20  # bytes searched at a time (a bound on the matches held)
_MOD: list = []  # [module or None], imported on first use
_AUTOMATA: dict = {}


def module():
    """ahocorasick_rs, or None when it does not import (the hook then runs the pure-Python path)."""
    if not _MOD:
        try:
            import ahocorasick_rs
        except ImportError:
            ahocorasick_rs = None
        _MOD.append(ahocorasick_rs)
    return _MOD[0]


def _automaton(mod, tokens: tuple):
    ac = _AUTOMATA.get(tokens)
    if ac is None:
        ac = _AUTOMATA[tokens] = mod.BytesAhoCorasick(
            [t.encode() for t in tokens], matchkind=mod.MATCHKIND_LEFTMOST_FIRST
        )
    return ac


class _Lines:
    """Line arithmetic over a buffer (bytes or mmap: find/rfind, no copy)."""

    def __init__(self, buf):
        self.buf, self.lo, self.hi = buf, 0, len(buf)
        self._cont: dict[int, bool] = {}

    def start(self, pos: int) -> int:
        return max(self.buf.rfind(b"\n", self.lo, pos) + 1, self.lo)

    def next(self, s: int) -> int:
        e = self.buf.find(b"\n", s, self.hi)
        return self.hi if e < 0 else e + 1

    def prev(self, s: int) -> int:
        return self.start(s - 1)

    def continues(self, s: int) -> bool:
        c = self._cont.get(s)
        if c is None:
            e = self.buf.find(b"\n", s, min(self.hi, s + logline.MAX_LINE))
            c = self._cont[s] = logline.continues(logline._line(self.buf, s, self.hi if e < 0 else e, True))
        return c

    def message_start(self, s: int, floor: int) -> int:
        while s > floor and s > self.lo and self.continues(s):
            s = self.prev(s)
        return s

    def back(self, s: int, floor: int, lines: int = 0) -> int:
        """From line start s up to the line its message starts on, then `lines` lines up and up to the start of
        that message; never above floor."""
        s = self.message_start(s, floor)
        if not lines:
            return s
        for _ in range(lines):
            if s <= floor or s <= self.lo:
                return s
            s = self.prev(s)
        return self.message_start(s, floor)

    def forward(self, s: int, lines: int = 0) -> int:
        """The end of line s, `lines` more lines, then the continuation lines after them."""
        s = self.next(s)
        for _ in range(lines):
            if s >= self.hi:
                return s
            s = self.next(s)
        while s < self.hi and self.continues(s):
            s = self.next(s)
        return s


def windows(buf, tokens: tuple, context: tuple, burst_lines: int, mod=None) -> list[list[int]]:
    """[start, end) byte spans of buf to parse, in order, disjoint and not touching. tokens: the literals
    to search; context: literals whose line also needs burst_lines lines around it (fatal AER), each holding a
    token."""
    mod = mod or module()
    wide = _wide(tokens, context)
    ac = _automaton(mod, tokens)
    ln = _Lines(buf)
    spans: list[list[int]] = []
    end = -1  # where the last window ends
    for idx, s in _hits(ac, buf):
        if s < end and idx not in wide:
            continue  # its line is in the last window already
        ls = ln.start(s)
        if idx in wide:  # the burst around it, even above the last window
            a, b = ln.back(ls, -1, burst_lines), ln.forward(ls, burst_lines)
        else:
            a, b = ln.back(ls, end), ln.forward(ls)
        while spans and a <= spans[-1][1]:  # overlapping or touching: one window
            a, b = min(a, spans[-1][0]), max(b, spans[-1][1])
            spans.pop()
        spans.append([a, b])
        end = b
    return spans


def _hits(ac, buf):
    """(token index, offset) of every reported match, searched CHUNK bytes at a time (cut after a newline: no
    match spans two chunks), so the matches held at once stay bounded however big the log."""
    n = len(buf)
    with memoryview(buf) as mv:
        c0 = 0
        while c0 < n:
            e = buf.find(b"\n", c0 + CHUNK) if c0 + CHUNK < n else -1
            c1 = n if e < 0 else e + 1
            with mv[c0:c1] as part:
                found = ac.find_matches_as_indexes(part)
            for idx, s, _e in found:
                yield idx, s + c0
            c0 = c1


def _wide(tokens: tuple, context: tuple) -> set:
    """Indexes of the tokens whose hit needs the burst around it: those inside a context literal, and those whose
    match could hide one of them. A leftmost-first search reports no match that overlaps an earlier one: every line
    holding a token is still reported (a match never spans a newline), but which token is seen matters here. A
    token is hidden only by one whose end is the start of it ("Surprise" could hide "severity=..." in
    "Surpriseverity="); a token inside another is never kept (anchors.pieces). So those are wide too."""
    wide = {i for i, t in enumerate(tokens) if any(t in c for c in context)}
    while True:
        more = {
            j
            for j, u in enumerate(tokens)
            for i in wide
            if any(u.endswith(tokens[i][:k]) for k in range(1, min(len(u), len(tokens[i]))))
        } - wide
        if not more:
            return wide
        wide |= more


def reduce(buf, tokens: tuple, context: tuple, burst_lines: int) -> bytes:
    """The windows of buf as one text, burst_lines+1 empty lines between two windows."""
    spans = windows(buf, tokens, context, burst_lines)
    gap = b"\n" * (burst_lines + 1)
    parts: list[bytes] = []
    for a, b in spans:
        if parts:
            parts.append(gap)
        part = buf[a:b]
        parts.append(part if part.endswith(b"\n") else part + b"\n")
    return b"".join(parts)
