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
