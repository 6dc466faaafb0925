"""Time, in one place: now as slurmkit writes it, ISO times read back, the --since and --now options, ages for
humans, and Slurm's own durations (the --time grammar). Standard library only; `datetime` is imported where a
function needs it (the hooks stamp records with `utc_iso()` alone).

Slurm durations: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS` in seconds. One parser for the job
spec's `time` (strict: bad text is a ValueError) and for scontrol's RunTime/TimeLimit (`duration_or_none`:
UNLIMITED and the like, or text that is not a duration, are None).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from .errors import UsageError

if TYPE_CHECKING:
    from datetime import datetime

ISO_Z = "%Y-%m-%dT%H:%M:%SZ"  # how slurmkit writes a time: UTC, seconds, a Z


def utc_iso(epoch: float | None = None) -> str:
    """`epoch` (default: now) as slurmkit writes times: 2026-11-30T09:16:01Z."""
    return time.strftime(ISO_Z, time.gmtime(epoch))


def now() -> datetime:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def parse_utc_iso(text: str) -> float:
    """Epoch seconds of a time slurmkit wrote (utc_iso's form); ValueError for anything else."""
    from datetime import datetime, timezone

    return datetime.strptime(text, ISO_Z).replace(tzinfo=timezone.utc).timestamp()


def parse_time(text) -> datetime | None:
    """An ISO time ("2026-11-30T09:16:01Z", with an offset, or naive: then local) -> aware datetime; None when
    `text` is not one."""
    from datetime import datetime

    if not isinstance(text, str) or not text:
        return None
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.astimezone()


def parse_now(text: str | None, option: str = "--now") -> datetime:
    """A `--now` option: the time a report is made as of (default: now)."""
    if not text:
        return now()
    t = parse_time(text)
    if t is None:
        raise UsageError(f"{option}: expected a date/time like 2026-11-30T10:00:00, got {text!r}")
    return t


_AGO_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.I)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: datetime, option: str = "--since") -> datetime:
    """'7d', '12h', '30m', '2w' (ago), or a date/time ('2026-11-01', '2026-11-01T08:00:00') -> aware datetime."""
    from datetime import timedelta

    m = _AGO_RE.match(text)
    if m:
        return now - timedelta(seconds=float(m[1]) * _UNIT[m[2].lower()])
    t = parse_time(text)
    if t is None:
        raise UsageError(f"{option}: expected a duration like 7d, 12h, 30m or a date like 2026-11-01, got {text!r}")
    return t


def human_age(seconds: float | None) -> str:
    """3d4h, 2h05m, 4m09s, 7s; ? when unknown."""
    if seconds is None:
        return "?"
    s = int(max(seconds, 0))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def slurm_local(epoch: float) -> str:
    """An epoch time as Slurm prints its own (local time, no zone): 2026-11-30T09:16:01."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


# --- Slurm durations ------------------------------------------------------------------------------------------

_N = r"[0-9]{1,9}"
TIME_RE = re.compile(
    rf"\A(?:(?P<d>{_N})-(?P<dh>{_N})(?::(?P<dm>{_N})(?::(?P<ds>{_N}))?)?"
    rf"|(?P<h>{_N}):(?P<m>{_N}):(?P<s>{_N})|(?P<m2>{_N}):(?P<s2>{_N})|(?P<m1>{_N}))\Z"
)
NO_LIMIT = ("UNLIMITED", "INFINITE", "NONE", "N/A", "PARTITION_LIMIT")


def seconds(text: str) -> int:
    """Seconds of a Slurm duration; ValueError when `text` is not one (a lone number is minutes, as in --time)."""
    m = TIME_RE.fullmatch(text)
    if not m:
        raise ValueError(text)
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "d" in g:
        return g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    if "h" in g:
        return g["h"] * 3600 + g["m"] * 60 + g["s"]
    if "m2" in g:
        return g["m2"] * 60 + g["s2"]
    return g["m1"] * 60


def duration_or_none(text: str | None) -> int | None:
    """A duration Slurm printed (scontrol's RunTime, TimeLimit) in seconds; None for no limit or unreadable."""
    t = (text or "").strip()
    if t.upper() in NO_LIMIT:
        return None
    try:
        return seconds(t)
    except ValueError:
        return None
