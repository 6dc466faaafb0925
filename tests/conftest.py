import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def fixture_text():
    def read(rel: str) -> str:
        return (FIXTURES / rel).read_text(encoding="utf-8", errors="replace")
    return read


@pytest.fixture
def sync_user():
    """A real non-root user for the sync's privilege drop (root only: created with useradd when missing)."""
    import pwd
    import subprocess
    if os.geteuid() != 0:
        pytest.skip("needs root: the epilog's privilege drop to the job's user")
    name = "skg-alice"
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


try:  # property tests: random locally (to find new cases), the same examples in CI (a red CI blocks landing)
    from hypothesis import settings as _hsettings
    _hsettings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    if os.environ.get("CI"):
        _hsettings.load_profile("ci")
except ImportError:
    pass
