"""Man pages generated from the CLI (dev/manpages.py, written by dev/docs_gen.py; test_docs.py checks they are
current): one per command and subcommand, valid roff, and shipped by the wheel."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
import manpages  # noqa: E402

from slurmkit.cli import COMMANDS  # noqa: E402


def test_every_command_has_a_page_with_its_options():
    pages = manpages.pages()
    assert {f"slurmkit-{c}.1" for c in COMMANDS} | {"slurmkit.1", "slurmkit-audit-resume.1"} <= set(pages)
    install = pages["slurmkit-install.1"]
    for opt in ("\\-\\-uninstall", "\\-\\-forward", "\\-\\-hook\\-wrapper", "\\-\\-remove\\-logs"):
        assert f".B {opt}" in install, opt
    assert '.TH SLURMKIT\\-CONFIG 1 ""' in pages["slurmkit-config.1"]


@pytest.mark.skipif(not shutil.which("groff"), reason="needs groff")
def test_every_page_is_valid_roff():
    for p in sorted((REPO / "man").glob("*.1")):
        r = subprocess.run(["groff", "-man", "-ww", "-z", str(p)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stderr == "", (p.name, r.stderr)


def test_the_wheel_ships_them():
    assert '"share/man/man1" = ["man/*.1"]' in (REPO / "pyproject.toml").read_text()
