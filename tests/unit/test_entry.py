"""The lean entry (slurmkit/entry.py): the command lines it runs without click give what the click CLI gives,
byte for byte (stdout, stderr, exit code); every other command line goes to click."""
import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings as hsettings, strategies as st

from slurmkit import entry

from clirun import run_cli

REPO = Path(__file__).resolve().parents[2]
SITE = str(REPO / "tests" / "golden" / "submit" / "site.yaml")
SPEC = str(REPO / "examples" / "finetune-1gpu.yaml")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURMKIT_CONFIG", SITE)


def run_entry(argv):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            entry.main(argv)
        except SystemExit as e:
            return e.code or 0, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv,want", [
    (["submit", "job.yaml"], ("submit", None, "job.yaml", [], set())),
    (["--config", "c.yaml", "submit", "--set", "a=1", "--set=b=--x", "--json", "--", "-job.yaml"],
     ("submit", "c.yaml", "-job.yaml", ["a=1", "b=--x"], {"--json"})),
    (["--config=c.yaml", "render", "job.yaml", "--set", "--dry-run"],
     ("render", "c.yaml", "job.yaml", ["--dry-run"], set())),
    (["submit", "-h"], None), (["-v", "submit", "j.yaml"], None), (["render", "--json", "j.yaml"], None),
    (["submit"], None), (["submit", "a.yaml", "b.yaml"], None), (["submit", "--set"], None),
    (["nodes"], None), ([], None), (["--config"], None), (["submit", "--no-chek", "j.yaml"], None),
])
def test_parse_fast_takes_only_the_lines_it_knows(argv, want):
    assert entry.parse_fast(argv) == want


OPTS = [["--set", "nodes=2"], ["--set=env.A=it's"], ["--set", "nodes=x"], ["--set=gpus=1"], ["--dry-run"],
        ["--json"], ["--no-check"], ["--"], [SPEC], ["/nonexistent.yaml"], ["--set", "--json"]]
# a submit always carries --dry-run --no-check: nothing reaches a cluster
ARGV = st.builds(lambda pre, cmd, opts, spec_at: pre + [cmd] + [t for o in opts for t in o][:spec_at] + [SPEC]
                 + [t for o in opts for t in o][spec_at:] + (["--dry-run", "--no-check"] if cmd == "submit" else []),
                 st.sampled_from([[], ["--config", SITE], [f"--config={SITE}"], ["-v"]]),
                 st.sampled_from(["render", "submit"]), st.lists(st.sampled_from(OPTS), max_size=4),
                 st.integers(0, 6))


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(ARGV)
def test_what_the_fast_path_runs_is_what_click_prints(argv):
    fast = entry.parse_fast(argv)
    assume(fast is not None)
    assert run_entry(argv) == run_cli(argv)


@pytest.mark.parametrize("argv", [
    ["render", SPEC, "--set", "nodes=2"], ["submit", "--dry-run", "--no-check", SPEC],
    ["submit", "--dry-run", "--json", "--no-check", SPEC], ["render", SPEC, "--set", "time=xx"],
    ["render", "/nonexistent.yaml"], ["--config", "/nonexistent.yaml", "render", SPEC],
])
def test_fast_and_click_agree_on_outputs_and_errors(argv):
    assert entry.parse_fast(argv) is not None
    got = run_entry(argv)
    assert got == run_cli(argv)
    assert got[0] in (0, 2)


def test_other_command_lines_go_to_click():
    rc, out, err = run_entry(["submit", "--help"])
    assert rc == 0 and out.startswith("Usage: slurmkit submit [OPTIONS] JOB.yaml")
    rc, out, err = run_entry(["submit", "--no-chek", SPEC])
    assert rc == 2 and "Did you mean '--no-check'?" in err
