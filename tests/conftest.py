import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the hooks these tests run never reach a node's own hook agent (/run/slurmkit/agent.sock) by accident: a test
# that wants one starts its own and names its socket (tests/unit/agent/test_server.py, test_agent_cluster.py)
os.environ.setdefault("SLURMKIT_AGENT_SOCKET", "none")
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


# what the README's compatibility table reports per Slurm version; `@pytest.mark.compat("audit")` puts an
# integration test in the subset that dev/test.sh runs on every version, under that capability
CAPABILITIES = ("nodes", "drain/resume", "prolog drain", "health", "epilog sync", "submit", "run/requeue", "audit", "install",
                "dev cluster")
_compat_of: dict[str, list[str]] = {}        # test id -> its capabilities
_compat_outcome: dict[str, str] = {}         # test id -> passed | failed | skipped


def pytest_configure(config):
    # registered here, not in pyproject.toml: that file's hash is the venvs' rebuild stamp
    config.addinivalue_line("markers", "compat(capability, ...): in the compatibility subset dev/test.sh runs on "
                            "every Slurm version (22.05, 24.11, 26.05), reported under that capability")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
        caps = [c for m in item.iter_markers("compat") for c in m.args]
        bad = [c for c in caps if c not in CAPABILITIES]
        if bad or any(not m.args for m in item.iter_markers("compat")):
            raise pytest.UsageError(f"{item.nodeid}: compat marker needs capabilities from {CAPABILITIES}, "
                                    f"got {bad or 'none'}")
        if caps:
            _compat_of[item.nodeid] = caps


def pytest_runtest_logreport(report):
    if report.nodeid not in _compat_of:
        return
    if report.failed:
        _compat_outcome[report.nodeid] = "failed"
    elif report.skipped and _compat_outcome.get(report.nodeid) != "failed":
        _compat_outcome[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and report.nodeid not in _compat_outcome:
        _compat_outcome[report.nodeid] = "passed"


def pytest_terminal_summary(terminalreporter):
    """One line per capability: the compatibility subset's result on the Slurm version this run used."""
    if not _compat_outcome:
        return
    version = os.environ.get("SLURMKIT_DEV_SLURM", "?")
    table = {}
    for cap in CAPABILITIES:
        got = [_compat_outcome[t] for t, caps in _compat_of.items() if cap in caps and t in _compat_outcome]
        table[cap] = {"passed": got.count("passed"), "failed": got.count("failed"),
                      "skipped": got.count("skipped"), "tests": len(got)}
    terminalreporter.write_sep("-", f"compatibility on Slurm {version}")
    for cap, r in table.items():
        verdict = "not run" if not r["tests"] else "FAIL" if r["failed"] else "skipped" if r["skipped"] else "pass"
        terminalreporter.write_line(f"{cap:14} {verdict:8} ({r['passed']} passed, {r['failed']} failed, "
                                    f"{r['skipped']} skipped)")
    out = os.environ.get("SLURMKIT_COMPAT_REPORT")
    if out:
        Path(out).write_text(json.dumps({"slurm": version, "capabilities": table,
                                         "tests": _compat_outcome}, indent=1) + "\n")


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
