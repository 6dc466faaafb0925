"""Every pinned command line (tests/golden/cli/cases.py) answers with the very stdout, stderr and exit code the
tree before issue 27 gave (the golden files were written from it): the redesign changed no --json output, no
exit code, no message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "cli"
sys.path.insert(0, str(GOLDEN))
import cases  # noqa: E402


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_the_answer_is_unchanged(name):
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    assert want["argv"] == cases.CASES[name]
    got = cases.run(cases.REPO, cases.CASES[name])
    assert (got["exit"], got["stderr"], got["stdout"]) == (want["exit"], want["stderr"], want["stdout"])
