"""Kernel-log lines: which lines can matter, their prefix (timestamp, host, who wrote it) and the message records
they form (a driver message split over continuation lines is one record).

Prefix forms (real captures in tests/fixtures/xid): dmesg seconds `[ 4254.197860]` (any padding), `dmesg -H`
relative `[  +0.000844]`, `dmesg -T`/`--ctime` `[Fri Apr  5 21:29:39 2024]`, syslog/journal `Jun  7 19:32:16 host
kernel:` in any locale (`kwi 15`, `6月 28`), journal short-precise `Sep 12 14:25:44.984246 host kernel:`, RFC3339 /
short-iso `2024-04-05T21:29:39.123+00:00 host kernel:` (a comma decimal too), `dmesg --decode` facility:level
`syslog:err   : ...`, kern.log's `host kernel: [ 123.4] ...`, and none at all. A line a userspace program wrote
(`/dev/kmsg`, logger) is marked by its facility or its tag: anything but `kern` / `kernel`.
"""

from __future__ import annotations

import re
from ...record import Record as RecordBase


from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

MAX_LINE = 8192  # longer lines (never the kernel's: it prints ~1 KiB at most) are cut here

_MONTHS = {
    m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)
}
PREFIX_RE = re.compile(
    r"^(?:(?P<fac>[a-z0-9]+)\s*:\s*(?P<lvl>[a-z]+)\s*:\s)?"  # dmesg --decode / -x: "kern  :err   : "
    r"[ \t]*(?:\[(?P<br>[^\]\n]{1,40})\]"  # [ 12.3] [ +0.1] [Fri Apr  5 ... 2024]
    r"|(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"  # RFC3339, short-iso
    r"|(?P<sys>[^\s\[\]:]{1,12}[ \t]{1,2}\d{1,2}[ \t]\d\d:\d\d:\d\d(?:[.,]\d+)?))?"
)  # Jun  7 19:32:16(.123456)
# after a syslog/journal/RFC3339 date: "host kernel:" or "host gpud[123]:", then kern.log's own "[ 12.3]"
HOST_RE = re.compile(
    r"[ \t]+(?P<host>[^\s:\[\]]+)[ \t]+(?P<tag>[\w.\-/@]+)(?:\[\d+\])?:(?=\s|$)"
    r"(?:[ \t]+\[(?P<br2>\s*\d+\.\d+)\])?"
)
_FUNC_RE = re.compile(r"^[\w.]+:\s")
_SECS_RE = re.compile(r"^\s*(\d+)\.(\d+)$")
_REL_RE = re.compile(r"^\s*\+\s*\d+\.\d+$")
_CLOCK_RE = re.compile(
    r"(?:(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ]|(?P<mon>[A-Za-z]{3})?\S*\s+(?P<d2>\d{1,2})\s)"
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d+))?"
)


class Record(RecordBase, kw_only=False):
    """One kernel message: its first physical line (number, text) and the continuation lines joined to it."""

    lineno: int  # 1-based, in the text parsed (kernlog.native: exact within a window, ordered across)
    line: str  # the first line as it is in the log (right-stripped), for the evidence
    body: str  # the message after the prefix, continuation lines joined with one space
    time: str | None  # the timestamp as printed
    t: float | None  # seconds, comparable within one log (since boot, or a wall clock), when known
    source: str  # "kernel", or who else wrote it ("syslog", "gpud" ...)
    extra: tuple = ()  # continuation lines as they are in the log


_NULS: dict[bool, Any] = {True: re.compile(b"\\0+"), False: re.compile("\\0+")}
SNAP = 1024  # a cut in a line over MAX_LINE moves back at most this far, to the start of a driver message


class _Seps:
    """Where lines end in one text: at a newline, and also (only when the text holds one, so the usual log pays two
    C searches for them) at a CR (old Mac line ends; CRLF is one end) and at a run of NULs (what a crash leaves in
    kern.log before the next boot's lines). Line numbers count newlines and lone CRs; a NUL run only ends a line."""

    def __init__(self, text, raw: bool):
        self.text, self.raw, self.n = text, raw, len(text)
        self.nl: Any = b"\n" if raw else "\n"
        cr: Any = b"\r" if raw else "\r"
        nul: Any = b"\0" if raw else "\0"
        self.cr = cr if text.find(cr) >= 0 else None
        self.nul = nul if text.find(nul) >= 0 else None
        self.crlf: Any = b"\r\n" if raw else "\r\n"

    def start(self, pos: int) -> int:
        """The start of the line holding pos."""
        t = self.text
        s = t.rfind(self.nl, 0, pos) + 1
        for sep in (self.cr, self.nul):
            if sep is not None:
                s = max(s, t.rfind(sep, s, pos) + 1)
        return s

    def end(self, s: int) -> int:
        """Where the line starting at s ends (its separator, or the end of the text)."""
        t = self.text
        e = t.find(self.nl, s)
        e = self.n if e < 0 else e
        for sep in (self.cr, self.nul):
            if sep is not None:
                x = t.find(sep, s, e)
                if x >= 0:
                    e = x
        return e

    def after(self, e: int) -> int:
        """The start of the line after the one ending at e (past a CRLF, and past NULs)."""
        t = self.text
        if e >= self.n:
            return self.n
        e += 2 if self.cr is not None and t.startswith(self.crlf, e) else 1
        if self.nul is not None:
            m = _NULS[self.raw].match(t, e)
            if m:
                e = m.end()
        return e

    def count(self, a: int, b: int) -> int:
        """Line ends between a and b."""
        t = self.text
        n = t.count(self.nl, a, b)
        if self.cr is not None:
            n += t.count(self.cr, a, b) - t.count(self.crlf, a, b)
        return n

    def pieces(self, s: int, e: int):
        """The line [s, e) as text, in pieces of at most MAX_LINE: a longer line (8 KiB of garbage glued to a
        driver message) is read on past every cut, each cut moved back to where a driver message (NVRM) starts, else
        to a space, so the message after it stays whole."""
        t = self.text
        nvrm: Any = b"NVRM" if self.raw else "NVRM"
        sp: Any = b" " if self.raw else " "
        while e - s > MAX_LINE:
            c = s + MAX_LINE
            x = t.rfind(nvrm, c - SNAP, c)
            if x < 0:
                x = t.rfind(sp, c - SNAP, c)
                x = c if x < 0 else x + 1
            yield _line(t, s, x, self.raw)
            s = x
        yield _line(t, s, e, self.raw)


def candidate_lines(text: str | bytes, keywords: tuple | None):
    """(lineno, line) for every line holding one of `keywords` (events.keywords(): the literal anchors of every
    pattern in use), in order: a str/bytes find over the whole text per keyword (the C string search), so a log of
    hundreds of megabytes costs a few passes, not a regex per line. keywords None (a pattern with no literal
    anchor): every line. Bytes (a log file read raw) are decoded line by line, only the lines that matter. Lines
    end at a newline, a CR or NULs (_Seps); a line over MAX_LINE comes in pieces, all with its number."""
    raw = isinstance(text, (bytes, bytearray, memoryview))
    sp = _Seps(text, raw)
    if keywords is None:
        yield from _every_line(sp)
        return
    starts: set[int] = set()
    for kw in keywords:
        k: Any = kw.encode() if raw else kw
        pos = text.find(k)
        while pos >= 0:
            s = sp.start(pos)
            starts.add(s)
            e = sp.end(max(s, pos))
            if e >= sp.n:
                break
            pos = text.find(k, e)
    lineno, at, done = 1, 0, 0
    ws = (b" ", b"\t") if raw else (" ", "\t")
    for s in sorted(starts):
        if s < done:
            continue  # already yielded as a continuation line
        lineno += sp.count(at, s)  # walks forward only: one pass over the text in all
        at = s
        while True:
            e = sp.end(s)
            for piece in sp.pieces(s, e):
                yield lineno, piece
            done = s = sp.after(e)
            # an indented line after it may continue its message (dmesg): parsed too, with or without a keyword
            if s >= sp.n or text[s : s + 1] not in ws:
                break
            lineno, at = lineno + sp.count(e, s), s


def _line(text, s: int, e: int, raw: bool) -> str:
    line = text[s : min(e, s + MAX_LINE)]
    if raw:
        line = line.decode("utf-8", "replace")
    return line.rstrip("\r")


def _every_line(sp: _Seps):
    """No prefilter: every line, numbered and cut the same way (what a site's unanchored signature needs)."""
    s, lineno = 0, 1
    if sp.nul is not None:  # NULs before the first line (a log that starts after a crash's hole)
        m = _NULS[sp.raw].match(sp.text, 0)
        s = m.end() if m else 0
    while s < sp.n:
        e = sp.end(s)
        for piece in sp.pieces(s, e):
            yield lineno, piece
        nxt = sp.after(e)
        s, lineno = nxt, lineno + sp.count(e, nxt)


def looks_like_a_log(text: str, keywords: tuple | None, lines: int = 200) -> bool:
    """Whether a capture holds kernel-log lines at all (a timestamp or host prefix on one of its first lines, or a
    driver line: `journalctl -o cat` prints no prefix): an empty file, random bytes or nvidia-smi output given as a
    kernel log is unreadable input, never "no events"."""
    if keywords is not None and next(candidate_lines(text, keywords), None) is not None:
        return True
    for line in text.splitlines()[:lines]:
        m = PREFIX_RE.match(line)
        assert m is not None  # every part of PREFIX_RE is optional: it matches any line
        if m.group("br") or m.group("iso") or (m.group("sys") and HOST_RE.match(line, m.end())):
            return True
    return False


def split_prefix(line: str) -> tuple[str, str | None, str, bool]:
    """(body, time as printed, source, is_continuation) of one physical line."""
    m = PREFIX_RE.match(line)
    assert m is not None  # every part of PREFIX_RE is optional: it matches any line
    fac, br, iso, sysd = m.group("fac"), m.group("br"), m.group("iso"), m.group("sys")
    end, tag = m.end(), None
    if iso or sysd:
        h = HOST_RE.match(line, end)
        if h:
            end, tag = h.end(), h.group("tag")
            br = br or h.group("br2")
        elif sysd and not fac:
            # a syslog date comes with its host and tag; without them this was message text that looked like one
            end, sysd = (m.start("sys"), None)
    time = (br or iso or sysd or "").strip() or None
    source = "kernel"
    if fac and fac != "kern":
        source = fac
    elif tag and tag != "kernel":
        source = tag
    cont = time is None and not fac and line[:1] in (" ", "\t")
    return line[end:].strip(), time, source, cont


def seconds(time: str | None) -> float | None:
    """A number comparable between records of one log: seconds since boot, else seconds within the year."""
    if not time:
        return None
    m = _SECS_RE.match(time)
    if m:
        return float(f"{m.group(1)}.{m.group(2)}")
    if _REL_RE.match(time):
        return None  # dmesg -H: a delta to the previous line, which may have been skipped
    m = _CLOCK_RE.search(time)
    if not m:
        return None
    day = int(m.group("d") or m.group("d2"))
    month = int(m.group("mo")) if m.group("mo") else _MONTHS.get((m.group("mon") or "").lower(), 0)
    frac = float("0." + m.group("f")) if m.group("f") else 0.0
    return ((month * 31 + day) * 24 + int(m.group("h"))) * 3600 + int(m.group("mi")) * 60 + int(m.group("s")) + frac


def continues(line: str) -> bool:
    """Whether a physical line may belong to the message of the line before it: an indented line (what
    candidate_lines reads on with, and dmesg's continuation) or a driver line _joins could join. False means a
    message starts here, whatever came before (kernlog.native cuts windows there)."""
    if line[:1] in (" ", "\t"):
        return True
    i = line.find("NVRM:")
    while i >= 0:  # first, without the prefix regex: an "NVRM:" going on in lower case
        nxt = line[i + 5 : i + 64].lstrip()[:1]
        if nxt == "(" or nxt.islower() or not nxt:
            break
        i = line.find("NVRM:", i + 5)
    if i < 0:
        return False
    body = split_prefix(line)[0]
    if not body.startswith("NVRM:"):
        return False
    rest = body[5:].lstrip()
    return not _FUNC_RE.match(rest) and (rest[:1] == "(" or rest[:1].islower())


def _joins(prev: Record, body: str, time: str | None, source: str, lineno: int, last_lineno: int) -> bool:
    """A syslog/journal line that continues the previous driver message (each continuation line carries its own
    prefix there): the very next line, same time and writer, the previous NVRM text unfinished, this one going on
    in lower case or with a parenthesis."""
    if lineno != last_lineno + 1 or time != prev.time or source != prev.source or not prev.body.startswith("NVRM"):
        return False
    if not body.startswith("NVRM:") or prev.body.rstrip()[-1:] in (".", "!", ":", ")"):
        return False
    rest = body[5:].lstrip()
    if _FUNC_RE.match(rest):
        return False  # "NVRM: osInitNvMapping: ..." is a message of its own
    return rest[:1] == "(" or rest[:1].islower()


def records(text: str | bytes, keywords: tuple | None) -> list[Record]:
    out: list[Record] = []
    last = -1
    for lineno, line in candidate_lines(text, keywords):
        body, time, source, cont = split_prefix(line)
        if out and lineno == last + 1 and (cont or _joins(out[-1], body, time, source, lineno, last)):
            p = out[-1]
            joined = body[5:].lstrip() if body.startswith("NVRM:") else body
            out[-1] = Record(p.lineno, p.line, f"{p.body} {joined}", p.time, p.t, p.source, p.extra + (line.rstrip(),))
            last = lineno
            continue
        out.append(Record(lineno, line.rstrip(), body, time, seconds(time), source))
        last = lineno
    return out
