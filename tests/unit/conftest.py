"""Shared by the unit tests, which mirror the package: tests/unit/<package>/test_<module>.py (docs/development.md).

Every directory here is a package (an __init__.py), so two test files may share a basename in different
directories; the helper modules beside this file (checkcases, clirun, fabric_synth, hooksite, nohang,
sbatch_parser, sitesettings, syslogsock) are imported by their plain names from any depth, as before."""
import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture
def make_settings():
    """sitesettings.make_settings: make_settings(yaml_text) -> the Settings a site config with that text gives."""
    from sitesettings import make_settings
    return make_settings
