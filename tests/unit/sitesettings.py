"""make_settings(): the one way the unit tests build a Settings, as a site's config file gives it.

Tests call it directly (`from sitesettings import make_settings`, where a module-level constant needs one) or
take the `make_settings` fixture (tests/unit/conftest.py), which is this function."""
import textwrap
from pathlib import Path

from slurmkit import config
from slurmkit.config import Settings

GOLDEN_SITE = Path(__file__).resolve().parents[1] / "golden" / "submit" / "site.yaml"


def make_settings(text: "str | Path" = "", path: str = "site.yaml") -> Settings:
    """The settings a site config gives: `text` is its YAML (dedented), checked and loaded as slurmkit loads
    /etc/slurmkit/config.yaml, errors naming `path` and the line; no text: every default. A Path is a config
    file read from disk (e.g. GOLDEN_SITE, the submit tests' site), errors naming that file."""
    if isinstance(text, Path):
        return config.loads(text.read_text(), str(text))
    return config.loads(textwrap.dedent(text), path)
