"""Signal names and numbers, as Slurm and users write them ("USR2", "SIGUSR2", "12"). Standard library only: the
job side (slurmkit.checkpoint), the wrapper (slurmkit.run), the settings' checks and the epilog all use this."""

from __future__ import annotations

import signal


def _canonical(name: str) -> str:
    n = name.strip().upper()
    return n if n.startswith("SIG") or n.isdigit() else "SIG" + n


def is_name(name: str) -> bool:
    """True for a signal this system knows by name ("USR2", "sigusr2"); numbers are not names."""
    return _canonical(name) in signal.Signals.__members__


def signum(name: str | int) -> int:
    """The number of "USR2" / "SIGUSR2" / "12" / 12. Unknown name: KeyError."""
    if isinstance(name, int):
        return name
    n = _canonical(name)
    return int(n) if n.isdigit() else int(signal.Signals[n])


def signame(num: int, unknown: str | None = None) -> str:
    """ "SIGUSR2" for 12; a number no signal has: `unknown`, else the number as text."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return str(num) if unknown is None else unknown
