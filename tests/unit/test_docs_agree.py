"""The docs say what the code and the shipped scripts do (issue 31): each contradiction an admin found, grepped so
it cannot come back."""
import re
from pathlib import Path

import pytest

from slurmkit.install import slurmconf

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def page(name: str) -> str:
    return " ".join((DOCS / name).read_text().split())        # one line: a phrase may wrap anywhere


def test_the_health_program_drains_by_itself_on_every_page_and_in_the_shipped_script():
    assert "drain" in (REPO / "slurmkit" / "hooks" / "health.py").read_text()   # what health/health runs
    for name in ("hooks.md", "health-program.md"):
        text = page(name)
        assert not re.search(r"runs `slurmkit check` \(which only reports\)", text), name
        assert not re.search(r"its exit code never drains a node: point it at a small script", text), name
        assert re.search(r"drains by itself", text), name


def test_no_page_says_a_requeued_job_runs_elsewhere_at_once():
    for p in DOCS.glob("*.md"):
        text = " ".join(p.read_text().split())
        assert not re.search(r"nohold_on_prolog_fail[^.]*\bat once\b", text), p.name
        assert not re.search(r"run elsewhere at once|runs elsewhere at once|requeued elsewhere\.", text), p.name
    # a job Slurm requeued after a failed prolog waits Slurm's hold; one `slurmkit run` requeued, its restart_delay
    assert "about 2 minutes on 22.05" in page("deploy.md")
    assert "~121 s" in page("run.md") and "StartTime=now+run.restart_delay" in page("run.md")


@pytest.mark.parametrize("name", ["install.md", "health-program.md"])
def test_the_pages_list_every_slurm_conf_line_install_prints(name):
    lines = slurmconf.required_lines("/p", "/e", 300, health="/h", health_interval=300)
    text = page(name)
    keys = [ln.key for ln in lines] if name == "install.md" else [ln.key for ln in lines if "Health" in ln.key]
    for key in keys:
        assert f"{key}=" in text, (name, key)
    assert "HealthCheckNodeState=ANY,CYCLE" in text


def test_deploy_uninstalls_with_the_command_not_rm_rf():
    text = page("deploy.md")
    assert "--uninstall" in text and not re.search(r"clush[^`]*rm -rf", text)


def test_every_json_option_names_a_docs_page_not_the_readme():
    for p in sorted((REPO / "slurmkit" / "commands").glob("*.py")):
        for m in re.finditer(r'"--json".*?help="([^"]*)"', p.read_text(), re.S):
            assert "README" not in m.group(1), p.name


def test_the_node_python_is_pinned_in_the_docs():
    for name in ("deploy.md", "install.md"):
        assert "install.python: /usr/bin/python3" in page(name), name
