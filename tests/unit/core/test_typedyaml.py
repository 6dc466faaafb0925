"""The one typed-YAML loader (slurmkit/typedyaml.py): config, job spec and job sync files share its parser, bounds
and messages. Property tests: any text is a value or a UsageError naming the file; bounds hold at their limit."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import example, given, settings, strategies as st

from slurmkit import typedyaml
from slurmkit.checkpoint.jobfile import read_job_file
from slurmkit.checkpoint.report import SyncError
from slurmkit.errors import UsageError
from slurmkit.record import Record, field


class Small(Record):
    name: str = "x"
    count: int = 1
    tags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_value_or_a_usage_error_naming_the_file(text):
    try:
        obj = typedyaml.parse_yaml(text, Small, "f.yaml")
    except UsageError as e:
        assert str(e).startswith("f.yaml"), str(e)
    else:
        assert isinstance(obj, Small)


names = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30), st.integers(-10**12, 10**12), st.lists(st.text(max_size=10), max_size=5),
       st.dictionaries(names, st.text(max_size=10), max_size=5))
def test_round_trip(name, count, tags, env):
    text = yaml.safe_dump({"name": name, "count": count, "tags": tags, "env": env}, sort_keys=False)
    assert typedyaml.parse_yaml(text, Small, "f.yaml") == Small(name=name, count=count, tags=tags, env=env)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200))
@example(63).via("the deepest a value under a key may go: the top mapping is level 1")
@example(64).via("one level past it")
def test_nesting_is_refused_exactly_past_the_limit(depth):
    # the top-level mapping is a level: `tags: [[...]]` with `depth` brackets nests depth + 1 collections (24.11's
    # CI run drew depth 64, which the test took for the limit and the loader rightly refused)
    text = "tags: " + "[" * depth + "]" * depth + "\n"
    if depth + 1 <= typedyaml.MAX_DEPTH:
        assert typedyaml.compose(text, "f.yaml") is not None
    else:
        with pytest.raises(UsageError) as e:
            typedyaml.compose(text, "f.yaml")
        assert str(e.value) == "f.yaml:1: tags: nested too deeply (the limit is 64 levels)"


def test_keys_and_items_are_bounded_while_libyaml_reads():
    with pytest.raises(UsageError, match=r"^f.yaml:\d+: env: more than 10000 keys"):
        typedyaml.compose("env:\n" + "".join(f"  k{i}: v\n" for i in range(10_001)), "f.yaml")
    with pytest.raises(UsageError, match=r"^f.yaml:\d+: tags: more than 10000 items"):
        typedyaml.compose("tags: [" + ", ".join("x" * 10_001) + "]\n", "f.yaml")


def test_the_job_sync_file_gets_the_same_messages(tmp_path):
    (tmp_path / ".slurmkit-sync.yaml").write_text("enabled: true\nkep: 2\n")
    with pytest.raises(SyncError) as e:
        read_job_file(str(tmp_path), ".slurmkit-sync.yaml")
    assert str(e.value) == f"{tmp_path}/.slurmkit-sync.yaml:2: unknown key 'kep'; did you mean 'keep'?"
    (tmp_path / ".slurmkit-sync.yaml").write_text("keep: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(SyncError, match=r":1: keep: nested too deeply \(the limit is 64 levels\)"):
        read_job_file(str(tmp_path), ".slurmkit-sync.yaml")
