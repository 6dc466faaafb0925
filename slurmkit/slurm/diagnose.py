"""What a Slurm client's stderr says went wrong, in one line a user can act on (pure; tested on real output).

Slurm's tools print the cause first and a generic line last: `sinfo --json` even exits 0 with a document whose only
error is "Unspecified error" when munge cannot be reached, and sbatch's last line repeats its own name
(`sbatch: error: Batch job submission failed: ...`). These functions find the cause and drop the repetition.
"""

from __future__ import annotations

import re

_MUNGE = re.compile(r'Munge encode failed: Failed to access "(?P<sock>[^"]+)": (?P<why>[^(\n]+?)\s*(?:\(|$)', re.M)
_MUNGE_OTHER = re.compile(r"Munge (?:encode|decode) failed: (?P<why>[^\n]+)", re.M)
_CONTACT = re.compile(r"Unable to contact slurm controller", re.I)


def auth_problem(stderr: str) -> str | None:
    """The munge problem in a Slurm client's stderr, as a sentence; None when there is none.

    'Munge encode failed: Failed to access "/run/munge/munge.socket.2": Permission denied (Did you start munged?)'
    -> 'cannot reach munge at /run/munge/munge.socket.2: Permission denied (this user may not open the socket:
    check the permissions of its directory, or ask an admin)'."""
    m = _MUNGE.search(stderr or "")
    if m:
        why = m["why"].strip()
        hint = (
            "this user may not open the socket: check the permissions of its directory, or ask an admin"
            if "ermission" in why
            else "is munged running? Slurm names its socket in slurm.conf's AuthInfo=socket="
        )
        return f"cannot reach munge at {m['sock']}: {why} ({hint})"
    m = _MUNGE_OTHER.search(stderr or "")
    if m:
        return f"munge refused the credential: {m['why'].strip()} (are the munge keys the same on every host?)"
    return None


def client_error(tool: str, stderr: str, stdout: str = "", returncode: int | None = None) -> str:
    """One line for a failed Slurm client call: the munge cause when there is one, else the last line of its
    stderr without the `tool: error: ` prefix it repeats. 'sbatch: error: Batch job submission failed: Invalid
    partition name specified' -> 'sbatch: Batch job submission failed: Invalid partition name specified'."""
    auth = auth_problem(stderr)
    if auth:
        return f"{tool}: {auth}"
    if _CONTACT.search(stderr or ""):
        return f"{tool}: unable to contact the Slurm controller (is slurmctld up? check SLURM_CONF and `scontrol ping`)"
    lines = [ln.strip() for ln in (stderr or stdout or "").splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exit code {returncode}"
    return f"{tool}: {strip_tool_prefix(tool, last)}"


def strip_tool_prefix(tool: str, line: str) -> str:
    """'sbatch: error: X' -> 'X'; 'sbatch: sbatch: error: X' -> 'X'; other lines unchanged."""
    prev = None
    while prev != line:
        prev = line
        for p in (f"{tool}: error: ", f"{tool}: ", "error: "):
            if line.startswith(p):
                line = line[len(p) :]
    return line
