"""Slurm durations: the --time grammar (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in seconds.
One parser for the job spec's `time` (strict: bad text is a ValueError) and for scontrol's RunTime/TimeLimit
(`duration_or_none`: UNLIMITED and the like, or text that is not a duration, are None). Standard library only."""

from __future__ import annotations

import re

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
