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


@pytest.fixture
def utc_local_time(monkeypatch):
    """Local time is UTC, as on the machine where tests/fixtures/local/ were captured (Slurm prints reason times
    in the controller's local time, and the JSON readers turn epochs into that)."""
    import time
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
