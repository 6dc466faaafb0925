"""What the tests of a GPU check share: judging a capture through the runner as `slurmkit check --capture
NAME=FILE` does, the real captures (tests/fixtures) holding a given text, and the verdict each must get."""
from pathlib import Path

from slurmkit import config
from slurmkit.health.runner import run_checks

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def judge(check: str, text: str, s=None):
    (r,) = run_checks(s or config.Settings(), "full", captures={check: text}).results
    return r


def holding(*needles: str) -> set[Path]:
    """Every real capture whose text holds one of `needles`."""
    return {p for p in FIX.rglob("*.txt") if any(k in p.read_text(errors="replace") for k in needles)}


def assert_verdict(check: str, path: Path, expected: dict) -> None:
    """The capture at `path` gets the (status, GPUs read) that `expected` names for it."""
    status, n = expected[path]
    r = judge(check, path.read_text())
    assert (r.status, len(r.evidence["gpus"])) == (status, n), r.reason
