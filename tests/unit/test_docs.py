"""The docs render as written and stay in step with the code: every fence closes (with a language on each opening
one, so a fence left open shows up as a mismatch instead of silently shifting every later block), no JSON is left
outside a fence, the generated pages are current and every config key has a description, links between pages
resolve, and the README stays a front door (under 200 lines, the two commands CI and the brief rely on first)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fence_problems(text: str) -> list[str]:
    out, open_at, marker = [], None, None
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if open_at is None:
                open_at, marker = i, m.group(1)
                if not m.group(2).strip():
                    out.append(f"line {i}: a fence opens without a language (```text, ```yaml ...)")
            elif m.group(1).startswith(marker[0]) and len(m.group(1)) >= len(marker):
                if m.group(2).strip():
                    out.append(f"line {i}: ```{m.group(2).strip()} closes the block opened at line {open_at}: "
                               "that block was never closed")
                open_at = None
            continue
        if open_at is None and re.match(r"^\s*[{\[]\s*\"", line):
            out.append(f"line {i}: JSON outside a code fence")
    if open_at is not None:
        out.append(f"line {open_at}: a fence that never closes")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_fence_closes_and_json_is_fenced(page):
    assert fence_problems(page.read_text()) == []


def test_the_checker_catches_an_unclosed_block():
    broken = "```yaml\na: 1\n## next section\n```sh\necho\n```\n"
    assert fence_problems(broken) == ["line 4: ```sh closes the block opened at line 1: that block was never closed",
                                      "line 6: a fence opens without a language (```text, ```yaml ...)",
                                      "line 6: a fence that never closes"]
    assert fence_problems('text\n{"a": 1}\n') == ["line 2: JSON outside a code fence"]


def test_generated_pages_are_current_and_every_config_key_is_described():
    r = subprocess.run([sys.executable, str(REPO / "dev" / "docs_gen.py"), "--check"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_key_without_a_comment_is_reported(monkeypatch):
    sys.path.insert(0, str(REPO / "dev"))
    import docs_gen
    from slurmkit import config
    from slurmkit.record import field
    from slurmkit.settings import Section

    class Extra(Section):
        """A synthetic section."""
        said: int = 1          # described
        silent: int = 2

    class Settings(config.Settings):
        extra: Extra = field(default_factory=Extra)

    monkeypatch.setattr(docs_gen.config, "Settings", Settings)
    rows = {k: note for k, _, _, note in docs_gen.config_rows()}
    assert rows["extra.said"] == "described" and rows["extra.silent"] == ""


def test_links_between_pages_resolve():
    bad = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                bad.append(f"{page.name}: {target}")
    assert bad == []


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 200
    first = re.search(r"```(?:sh|bash)\n(.*?)```", text, re.S).group(1).splitlines()
    assert first[0].startswith("bash dev/demo.sh") and first[1].startswith("bash dev/test.sh")
    for name in ("deploy.md", "config.md", "operations.md", "development.md", "compatibility.md"):
        assert f"docs/{name}" in text
