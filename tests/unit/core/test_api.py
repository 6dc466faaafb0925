"""The Python API (slurmkit.render/submit): the CLI's own path, keyword overrides, typed errors with file:line,
and an `import slurmkit` that stays light. Submission on the real cluster: tests/integration/test_submit_api.py."""
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

import slurmkit
from slurmkit import api
from slurmkit.errors import SpecError, UsageError

from clirun import run_cli

REPO = Path(__file__).resolve().parents[3]
SITE = REPO / "tests" / "golden" / "submit" / "site.yaml"
EX = REPO / "examples"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("example", sorted(p.name for p in EX.glob("*.yaml")))
def test_render_is_the_cli_render_for_the_same_spec_and_overrides(example):
    path = EX / example
    rc, out, err = run_cli(["--config", str(SITE), "render", str(path), "--set", "nodes=2",
                            "--set", "preemption.signal_lead=900", "--set", "env.EXTRA=it's"])
    assert rc == 0, err
    script = slurmkit.render(path, config=SITE, nodes=2, preemption__signal_lead=900, env__EXTRA="it's")
    assert script == out
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --signal=B:USR2@900\n" in script


def test_a_mapping_renders_as_the_same_spec_in_a_file(tmp_path):
    spec = {"name": "ft", "partition": "gpu", "gpus_per_node": 1, "time": "01:00:00", "command": ["python", "t.py"],
            "env": {"HF_HOME": "/scratch/hf"}}
    f = tmp_path / "job.yaml"
    f.write_text("name: ft\npartition: gpu\ngpus_per_node: 1\ntime: '01:00:00'\ncommand: [python, t.py]\n"
                 "env: {HF_HOME: /scratch/hf}\n")
    from_dict = slurmkit.render(spec, config=SITE)
    from_file = slurmkit.render(f, config=SITE)
    # the only difference: the comment naming the spec file (a mapping's is "job")
    assert from_dict.replace("from job:", "from job.yaml:") == from_file
    assert "#SBATCH --time=01:00:00\n" in from_dict and "export HF_HOME=/scratch/hf\n" in from_dict


def test_a_bad_spec_file_raises_spec_error_with_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\ncommand: [true]\nnodes: two\n")
    with pytest.raises(SpecError) as e:
        slurmkit.render(f, config=SITE)
    assert (e.value.path, e.value.line) == (str(f), 3)
    assert str(e.value) == f"{f}:3: nodes: expected an integer, got a string ('two')"
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2
    f.write_text("name: x\ncommand: [true]\ntime: '1:2:3:4'\n")
    with pytest.raises(SpecError) as e:
        slurmkit.render(f, config=SITE)
    assert (e.value.path, e.value.line) == (str(f), 3) and "time: expected a Slurm time" in str(e.value)
    f.write_text("name: x\ncommand: [true\n")
    with pytest.raises(SpecError) as e:
        slurmkit.render(f, config=SITE)
    assert e.value.path == str(f) and e.value.line is not None and "YAML syntax error" in str(e.value)
    with pytest.raises(SpecError) as e:
        slurmkit.render(tmp_path / "missing.yaml", config=SITE)
    assert e.value.path == str(tmp_path / "missing.yaml")


def test_overrides_and_mappings_are_checked_like_set(tmp_path):
    with pytest.raises(SpecError) as e:
        slurmkit.render(EX / "finetune-1gpu.yaml", config=SITE, nodes="two")
    assert e.value.line is None and str(e.value).startswith('--set nodes="two": ')
    with pytest.raises(SpecError, match="unknown key 'gpu_per_node'; did you mean 'gpus_per_node'"):
        slurmkit.render(EX / "finetune-1gpu.yaml", config=SITE, gpu_per_node=2)
    with pytest.raises(SpecError) as e:
        slurmkit.render({"command": ["true"], "mem": "lots"}, config=SITE)
    assert (e.value.path, e.value.line) == ("<dict>", None) and str(e.value).startswith("<dict>: mem: expected a size")
    with pytest.raises(SpecError, match="not plain data"):
        slurmkit.render({"command": ["true"], "env": {"X": object()}}, config=SITE)
    with pytest.raises(SpecError, match="override env: not plain data"):
        slurmkit.render(EX / "finetune-1gpu.yaml", config=SITE, env={"X": object()})


@hsettings(max_examples=60, deadline=None)
@given(value=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40),
       key=st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,10}\Z"))
def test_any_override_value_reaches_the_script_quoted_as_given(value, key):
    """A keyword value is data, never YAML or shell: it comes out as exactly one shell word equal to it."""
    script = slurmkit.render({"command": ["true"], "gpus_per_node": 0}, config=SITE, env={key: value})
    rest = script[script.index(f"\nexport {key}=") + len("\nexport "):]
    lex = shlex.shlex(rest, posix=True)
    lex.whitespace_split = True
    assert lex.get_token() == f"{key}={value}"


def test_overrides_to_sets_nests_on_double_underscore():
    assert api.overrides_to_sets({"preemption__signal_lead": 60, "env": {"A": "b"}, "command": "echo a: b"}) == [
        "preemption.signal_lead=60", 'env={"A": "b"}', 'command="echo a: b"']


def test_import_slurmkit_stays_light():
    """The hooks `import slurmkit.x`: the API is loaded on first use only, and it does not pull click."""
    code = ("import sys, slurmkit, slurmkit.errors; v = slurmkit.__version__; "
            "print(sorted(m for m in ('click', 'yaml', 'jinja2', 'slurmkit.api') if m in sys.modules)); "
            "slurmkit.submit; print(sorted(m for m in ('click', 'jinja2', 'paramiko') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.splitlines() == ["[]", "[]"]
    with pytest.raises(AttributeError):
        slurmkit.no_such_thing


def test_the_client_keeps_its_settings_until_refresh(tmp_path, monkeypatch):
    cfg = tmp_path / "site.yaml"
    cfg.write_text("submit:\n  default_partition: a\n")
    c = api.Client(cfg)
    assert "#SBATCH --partition=a\n" in c.render({"command": ["true"]})
    cfg.write_text("submit:\n  default_partition: b\n")
    assert "#SBATCH --partition=a\n" in c.render({"command": ["true"]})   # cached for the process
    c.refresh()
    assert "#SBATCH --partition=b\n" in c.render({"command": ["true"]})


JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False,
                       allow_infinity=False) | st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                  max_size=4), max_leaves=12)


@hsettings(max_examples=200, deadline=None)
@given(JSONISH)
def test_yaml_text_reads_back_as_the_same_value(value):
    import yaml
    from slurmkit.jobs.pipeline import yaml_text
    assert yaml.safe_load(yaml_text(value)) == value
