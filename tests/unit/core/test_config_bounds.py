"""Issue 17 W2/H2/H7/H8/T1/T4 and issue 16's one settings type: the config refuses nonsense numbers with
file:line, every numeric key has a documented range, hostile inputs are bounded, and the hooks' cache gives the
same records as the YAML loader."""
import json
import os
import subprocess
import sys
import textwrap
import typing

import pytest

from slurmkit import config, record, settings
from slurmkit.errors import UsageError

PATH = "/etc/slurmkit/config.yaml"


def err(text: str) -> str:
    with pytest.raises(UsageError) as e:
        config.loads(textwrap.dedent(text), PATH)
    assert e.value.exit_code == 2
    return str(e.value)


@pytest.mark.parametrize("text,expected", [
    ("nccl:\n  min_ratio: .nan\n", f"{PATH}:2: nccl.min_ratio: expected a number in (0, 1], got nan"),
    ("nccl:\n  min_ratio: -1\n", f"{PATH}:2: nccl.min_ratio: expected a number in (0, 1], got -1.0"),
    ("nccl:\n  expected_busbw_gbps: .nan\n", f"{PATH}:2: nccl.expected_busbw_gbps: expected a number in "
     "(0, 100000], got nan"),
    ("ecc:\n  volatile_uncorrectable_max: -1\n", f"{PATH}:2: ecc.volatile_uncorrectable_max: expected an "
     "integer in [0, 1000000000], got -1"),
    ("health:\n  command_timeout: 3\n  budget_seconds: -1\n", f"{PATH}:3: health.budget_seconds: expected a "
     "number in (0, 86400], got -1.0"),
    ("slurm:\n  timeout: .inf\n", f"{PATH}:2: slurm.timeout: expected a number in (0, 3600], got inf"),
    ("nccl:\n  profiles:\n    'n[1-4]': .nan\n", f"{PATH}:3: nccl.profiles.n[1-4]: expected a number in "
     "(0, 100000], got nan"),
    ("xid:\n  ignore: [13, -5]\n", f"{PATH}:2: xid.ignore[1]: expected an integer in [0, 1000000], got -5"),
    ("sync:\n  keep: 0\n", f"{PATH}:2: sync.keep: expected an integer in [1, 100000], got 0"),
    ("sync:\n  algo: shake_128\n", f"{PATH}:2: sync.algo: expected one of"),
])
def test_out_of_range_numbers_are_refused_with_file_line_and_key(text, expected):
    assert err(text).startswith(expected)


def test_in_range_values_load():
    s = config.loads("nccl:\n  min_ratio: 1\n  expected_busbw_gbps: 350.5\necc:\n  volatile_uncorrectable_max: 0\n")
    assert s.nccl.min_ratio == 1.0 and s.nccl.expected_busbw_gbps == 350.5


def _numeric(tp) -> bool:
    args = typing.get_args(tp)
    if tp in (int, float):
        return True
    if typing.get_origin(tp) is dict:
        return _numeric(args[1])
    return any(_numeric(a) for a in args if a is not type(None))


def test_every_numeric_key_has_a_documented_range():
    missing = []
    for name, cls in settings.SECTIONS.items():
        hints = settings.type_hints(cls)
        for f in record.fields(cls):
            if _numeric(hints[f.name]) and "range" not in f.metadata:
                missing.append(f"{name}.{f.name}")
    assert missing == []
    ref = {k: r for k, _, _, r in settings.reference()}
    assert ref["nccl.min_ratio"] == "(0, 1]" and ref["sync.keep"] == "[1, 100000]"


def test_defaults_are_inside_their_ranges():
    settings.Settings()      # every section's __post_init__ runs its range check over the defaults


def _bomb(levels: int = 9) -> str:
    """A flow sequence whose anchors nest: 10^levels strings once expanded, a few hundred bytes as text."""
    parts = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "[" + ", ".join(parts) + "]"


def test_alias_bomb_in_a_mapping_key_is_refused():
    # before: the key was turned into text (a billion nodes) to look it up; now refused at the key
    msg = _in_subprocess(f"? {_bomb()}\n: 1\n")
    assert msg == "bomb.yaml:1: a key must be a plain string, got a list"
    msg = _in_subprocess(f"health:\n  profiles:\n    ? {_bomb()}\n    : [xid]\n")
    assert msg == "bomb.yaml:3: a key must be a plain string, got a list"


class Deep(record.Record):
    x: list[list[list[list[list[list[list[list[list[str]]]]]]]]]


def _uniform_bomb(levels: int = 9) -> str:
    """The same, every item at the same depth: level i is [level i-1 (anchored), then 9 aliases of it]."""
    text = "&a0 [x, x, x, x, x, x, x, x, x, x]"
    for i in range(1, levels):
        text = f"&a{i} [{text}, " + ", ".join([f"*a{i - 1}"] * 9) + "]"
    return text


def test_alias_expansion_is_bounded():
    # a schema that accepts the bomb's shape still stops after MAX_NODES nodes, aliases counted at each use
    with pytest.raises(UsageError) as e:
        config.parse_yaml(f"x: {_uniform_bomb()}\n", Deep, "bomb.yaml")
    assert str(e.value).startswith("bomb.yaml:1: too many YAML nodes (the limit is 100000")


def _in_subprocess(text: str) -> str:
    """Load text in a child with a generous timeout: a regression hangs one test, not the suite."""
    code = ("import sys\nfrom slurmkit import config\nfrom slurmkit.errors import UsageError\n"
            "try:\n    config.loads(sys.stdin.read(), 'bomb.yaml')\nexcept UsageError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_a_50_mb_config_is_refused_by_size(tmp_path):
    p = tmp_path / "big.yaml"
    with open(p, "w") as f:
        line = "# " + "x" * 1000 + "\n"
        for _ in range(50 * 1024):
            f.write(line)
    with pytest.raises(UsageError) as e:
        config.load(str(p))
    assert str(e.value).startswith(f"{p}: config file is ") and "over the limit of 1 MiB" in str(e.value)


def test_a_fifo_or_a_device_as_config_is_refused(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="config file is a FIFO: only regular files are read"):
        config.load(str(fifo))
    with pytest.raises(UsageError, match="/dev/zero: config file is a device"):
        config.load("/dev/zero")
    assert config.load("/dev/null") == config.loads("", "/dev/null")   # the usual "no site config"


def test_deep_nesting_is_a_clear_error_not_a_recursion_error():
    msg = err("health:\n  profiles:\n    x: " + "[" * 5000 + "]" * 5000 + "\n")
    assert msg == f"{PATH}:3: nested too deeply (the limit is 64 levels)"  # libyaml's bound (1000) met first
    msg = err("health:\n  profiles:\n    x: " + "[" * 100 + "]" * 100 + "\n")
    assert msg == f"{PATH}:3: health.profiles.x: nested too deeply (the limit is 64 levels)"


def test_huge_integers_are_a_clear_error():
    msg = err("sync:\n  keep: " + "9" * 5000 + "\n")
    assert msg == f"{PATH}:2: sync.keep: integer too long (5000 characters; the limit is 30 digits)"
    msg = err("nccl:\n  min_ratio: " + "9" * 5000 + "\n")
    assert "nccl.min_ratio: number too long" in msg
    assert "got inf" in err("nccl:\n  min_ratio: 1" + "0" * 400 + ".0\n")
