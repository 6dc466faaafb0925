"""Per-node settings (`overrides:`): checked like top-level keys with file and line, merged per node with the
source of every value, and written to each node as a config that loads back to the same settings."""
import pytest

from slurmkit import config
from slurmkit.errors import UsageError
from slurmkit.install import nodeconfig
from slurmkit.settings import to_dict
from slurmkit.settings.overrides import merge

SITE = """\
gpu_count:
  expected: 8
overrides:
  - nodes: gpu[001-002]
    set:
      gpu_count: {expected: 4}
      nvlink: {status: warn}
  - features: [nodcgm, h100]
    set:
      dcgm: {level: 2}
  - nodes: gpu002
    set:
      gpu_count: {expected: 2}
"""


def load(text, path="/site.yaml"):
    return config.loads(text, path)


def test_a_node_gets_its_overrides_in_order_and_says_where_each_value_came_from():
    s = load(SITE)
    m, src = merge(s, "gpu001", [])
    assert (m.gpu_count.expected, m.nvlink.status, m.dcgm.level) == (4, "warn", 1)
    assert src["gpu_count.expected"] == "/site.yaml:6 (overrides[0] nodes gpu[001-002])"
    assert src["dcgm.level"] == "default"
    m, src = merge(s, "gpu002", ["h100", "nodcgm", "ib"])
    assert (m.gpu_count.expected, m.dcgm.level) == (2, 2)          # the later entry wins
    assert src["gpu_count.expected"] == "/site.yaml:13 (overrides[2] nodes gpu002)"
    assert src["dcgm.level"] == "/site.yaml:10 (overrides[1] features nodcgm,h100)"
    m, src = merge(s, "gpu003", ["h100"])                            # not all the features: no match
    assert (m.gpu_count.expected, m.dcgm.level) == (8, 1) and src["gpu_count.expected"] == "/site.yaml:2"


@pytest.mark.parametrize("entry, line, msg", [
    ("  - nodes: gpu1\n    set: {nvlink: {bogus: 1}}\n", 5,
     "overrides[0].set: unknown key 'nvlink.bogus' (expected one of: status, error_threshold, inactive_by_design)"),
    ("  - nodes: gpu1\n    set:\n      gpu_count: {expected: many}\n", 6,
     "overrides[0].set: gpu_count.expected: expected an integer or null, got a string ('many')"),
    ("  - nodes: gpu1\n    set:\n      dcgm:\n        level: 9\n", 7,
     "overrides[0].set: dcgm.level: expected an integer in [1, 4], got 9"),
    ("  - nodes: gpu1\n    set:\n      nvlnk: {status: warn}\n", 6, "overrides[0].set.nvlnk: unknown section"),
    ("  - nodes: gpu1\n    set:\n      install: {python: /usr/bin/python3}\n", 6,
     "overrides[0].set.install: the install section cannot differ per node"),
    ("  - nodes: gpu1\n    features: [a]\n    set: {dcgm: {level: 2}}\n", 4,
     "overrides[0]: give exactly one of nodes (a hostlist) or features"),
    ("  - features: [a]\n", 4, "overrides[0].set: nothing to set"),
    ("  - nodes: gpu1\n    sett: {}\n", 5, "unknown key 'overrides[0].sett'; did you mean 'set'?"),
])
def test_a_bad_override_names_the_file_line_and_key(entry, line, msg):
    with pytest.raises(UsageError) as e:
        load("gpu_count:\n  expected: 8\noverrides:\n" + entry)
    assert (e.value.path, e.value.line) == ("/site.yaml", line) and e.value.message.startswith(msg), str(e.value)


def test_each_node_gets_its_merged_config_which_loads_back_to_the_same_settings():
    s = load(SITE)
    out = nodeconfig.configs(s, SITE.encode(), ["gpu001", "gpu003"], {"gpu001": None, "gpu003": None})
    one = out["gpu001"].decode()
    assert one.startswith("# written by `slurmkit install` for node gpu001 from /site.yaml: the site config with "
                          "overrides[0] nodes gpu[001-002] applied.")
    assert to_dict(config.loads(one)) == to_dict(merge(s, "gpu001", None)[0])
    assert config.loads(one).gpu_count.expected == 4 and "overrides" not in one.split("\n", 2)[2]
    assert config.loads(out["gpu003"].decode()).gpu_count.expected == 8
    assert nodeconfig.configs(load("gpu_count: {expected: 8}\n"), b"x", ["a"], {}) == {"a": b"x"}   # no overrides


def test_features_come_from_sinfo_and_an_unknown_node_is_refused():
    assert nodeconfig.parse_features("gpu1|h100,nodcgm\ngpu2|(null)\ngpu1|ib\n") == {
        "gpu1": ["h100", "nodcgm", "ib"], "gpu2": []}
    s = load(SITE)
    assert nodeconfig.features_for(s, ["gpu1"], lookup=lambda _: {"gpu1": ["h100"]}) == {"gpu1": ["h100"]}
    with pytest.raises(UsageError, match="Slurm does not know gpu9"):
        nodeconfig.features_for(s, ["gpu9"], lookup=lambda _: {"gpu1": []})


def test_config_node_says_it_could_not_find_out_when_slurm_does_not_answer(tmp_path):
    import os
    import subprocess
    import sys

    cfg = tmp_path / "site.yaml"
    cfg.write_text(SITE + "slurm:\n  bin_dir: " + str(tmp_path / "no-slurm-here") + "\n")
    run = [sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(cfg), "config"]
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_CONFIG"}
    r = subprocess.run([*run, "--node", "gpu001"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 3 and "sinfo did not answer" in r.stderr and "--features" in r.stderr, r.stderr
    r = subprocess.run([*run, "--node", "gpu001", "--features", "", "--changed"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0 and "gpu_count.expected  4" in r.stdout, r.stdout + r.stderr
    site = cfg.with_name("x.yaml")
    site.write_text("install:\n  site_config_src: /etc/slurmkit/{node}.yaml\n")
    r = subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(site),
                        "install", "--nodes", "gpu001", "--dry-run"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 2 and "{node} is not expanded" in r.stderr and "`overrides:`" in r.stderr, r.stderr
