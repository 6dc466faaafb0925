"""The CLI's settings cache (slurmkit/configcache.py): the same Settings as the YAML loader, from the file's bytes
only; never a stale or foreign entry; a bad config always fails with its file and line."""
import os
import subprocess
import sys

import pytest

from slurmkit import config, configcache
from slurmkit.errors import UsageError

SITE = "slurm:\n  timeout: 3\n  backend: cli\naudit:\n  price_per_gpu_hour: 2.5\nsync:\n  keep: 4\n"


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMKIT_NO_CACHE", raising=False)
    p = tmp_path / "site.yaml"
    p.write_text(SITE)
    return p


def entries(tmp_path):
    d = tmp_path / "cache" / "slurmkit" / "settings"
    return sorted(d.glob("*.json")) if d.exists() else []


def test_the_second_load_comes_from_the_cache_and_is_the_same_settings(cfg, tmp_path):
    first = configcache.load(str(cfg))
    assert first == config.load(str(cfg)) and len(entries(tmp_path)) == 1
    again = configcache.load(str(cfg))
    assert again == first and again.source == str(cfg) and again.lines["sync.keep"] == 7
    code = ("import sys; from slurmkit import configcache; s = configcache.load(sys.argv[1]); "
            "print(s.sync.keep, 'yaml' in sys.modules)")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, env=env).stdout
    assert out == "4 False\n"                                   # served without importing PyYAML


def test_a_changed_file_is_parsed_again(cfg, tmp_path):
    configcache.load(str(cfg))
    cfg.write_text(SITE.replace("keep: 4", "keep: 5"))
    assert configcache.load(str(cfg)).sync.keep == 5 and len(entries(tmp_path)) == 2


def test_a_bad_config_fails_with_file_and_line_every_time(cfg):
    cfg.write_text(SITE.replace("keep: 4", "keep: 0"))
    for _ in range(2):
        with pytest.raises(UsageError) as e:
            configcache.load(str(cfg))
        assert str(e.value).startswith(f"{cfg}:7: sync.keep: expected an integer in [1,")
    cfg.write_text(SITE + "nope: 1\n")
    with pytest.raises(UsageError, match=r"site.yaml:8: unknown key 'nope'"):
        configcache.load(str(cfg))


def test_an_entry_someone_else_could_write_is_not_used(cfg, tmp_path):
    configcache.load(str(cfg))
    (entry,) = entries(tmp_path)
    entry.write_text(entry.read_text().replace('"keep": 4', '"keep": 9'))
    assert configcache.load(str(cfg)).sync.keep == 9           # ours (the test wrote it as us): used
    os.chmod(entry, 0o666)
    assert configcache.load(str(cfg)).sync.keep == 4           # group/world-writable: parsed instead
    os.chmod(entry.parent, 0o777)
    assert configcache.load(str(cfg)).sync.keep == 4


def test_an_entry_the_schema_refuses_is_parsed_instead(cfg, tmp_path):
    configcache.load(str(cfg))
    (entry,) = entries(tmp_path)
    entry.write_text(entry.read_text().replace('"keep": 4', '"keep": -1'))
    assert configcache.load(str(cfg)).sync.keep == 4
    entry.write_text("{not json")
    assert configcache.load(str(cfg)).sync.keep == 4


def test_no_cache_and_missing_files_take_the_loader(cfg, tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="config file not found"):
        configcache.load(str(tmp_path / "nope.yaml"))
    monkeypatch.setenv("SLURMKIT_NO_CACHE", "1")
    assert configcache.load(str(cfg)).sync.keep == 4 and entries(tmp_path) == []


def test_yaml_data_is_served_from_the_cache_only_while_the_text_is_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMKIT_NO_CACHE", raising=False)
    p = str(tmp_path / "t.yaml")
    assert configcache.safe_load(p, "a: [1, x]\n") == {"a": [1, "x"]}
    assert configcache.safe_load(p, "a: [1, x]\n") == {"a": [1, "x"]} and len(entries(tmp_path)) == 1
    assert configcache.safe_load(p, "a: [2]\n") == {"a": [2]}
    import datetime
    assert configcache.safe_load(p, "d: 2026-12-01\n") == {"d": datetime.date(2026, 12, 1)}   # not JSON: not kept
    assert len(entries(tmp_path)) == 2
    import yaml
    with pytest.raises(yaml.YAMLError):
        configcache.safe_load(p, "a: [\n")


def test_a_bad_cause_table_still_fails_with_its_line(tmp_path, monkeypatch):
    from slurmkit import audit
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    p = tmp_path / "causes.yaml"
    p.write_text("slurmkit:\n  - id: x\n    next: y\n  - [\n")
    for _ in range(2):
        with pytest.raises(UsageError, match=r"causes.yaml:\d+: YAML error in cause table"):
            audit.load_causes(p)
