"""`install --verify`: the node's own `slurmkit check --json`, run with the installed venv and config, and the one
line a failed verify shows in the table."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .layout import Layout
    from .ssh import Transport


def verify(t: Transport, lay: Layout, timeout: float) -> dict:
    """Run the node's own `slurmkit check --json --node NODE` (the installed venv, the installed config)."""
    argv = ["env", f"SLURMKIT_CONFIG={lay.config}", lay.slurmkit, "check", "--json", "--node", lay.node]
    r = t.run(argv, timeout=timeout)
    report = None
    try:
        import json

        report = json.loads(r.stdout) if r.stdout.strip() else None
    except ValueError:
        pass
    err = r.stderr.strip().splitlines()
    return {
        "ok": r.returncode == 0,
        "argv": argv[2:],
        "returncode": r.returncode,
        "report": report,
        "error": err[-1] if err and r.returncode != 0 else None,
        "why": verify_reason(r.returncode, report, err),
    }


def verify_reason(returncode: int, report, stderr_lines: list[str]) -> str | None:
    """What an admin needs from a failed verify, in one line: the failing checks and their reasons, else the
    last line the command printed on stderr, else its exit code."""
    if returncode == 0:
        return None
    bad = []
    if isinstance(report, dict):
        bad = [r for r in report.get("results") or [] if isinstance(r, dict) and r.get("status") == "fail"]
    if bad:
        return "; ".join(f"{r.get('check')}: {r.get('reason') or 'fail'}" for r in bad)
    if stderr_lines:
        return stderr_lines[-1]
    return f"slurmkit check exited {returncode}"
