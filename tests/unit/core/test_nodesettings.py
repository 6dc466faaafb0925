"""The node's settings file (slurmkit/nodesettings.py): `install` writes it beside the site config from the one
loader, stamped with the YAML's sha256; a hook uses it only while the stamp matches and only root or the running
user could have written it. A planted, writable, linked or foreign one is never used (the YAML is parsed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurmkit import config, nodesettings, settings
from slurmkit.errors import UsageError

YAML = "gpu_count:\n  expected: 8\nsync:\n  keep: 2\ntools:\n  nvidia_smi: /usr/bin/nvidia-smi\n"


@pytest.fixture
def site(tmp_path, monkeypatch):
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    cfg = d / "config.yaml"
    cfg.write_text(YAML)
    sp = d / "config.settings.json"
    sp.write_bytes(nodesettings.render(cfg.read_bytes(), str(cfg)))
    monkeypatch.setenv("SLURMKIT_CONFIG", str(cfg))
    return cfg, sp


def _plant(sp, **tools):
    """The settings file with other values but the right stamp: what someone who can write it could leave."""
    doc = json.loads(sp.read_text())
    doc["settings"]["tools"].update(tools)
    sp.write_text(json.dumps(doc))


def test_the_file_is_the_loaders_settings_with_its_lines(site):
    cfg, sp = site
    s = nodesettings.load()
    assert type(s) is settings.Settings and type(s.sync) is settings.SyncSettings
    assert s == config.load() and s.source == str(cfg) and s.lines["sync.keep"] == 4
    assert sp.name == "config.settings.json" and nodesettings.settings_path("/etc/slurmkit/config.yaml") == \
        "/etc/slurmkit/config.settings.json"


def test_a_matching_stamp_costs_no_yaml_import(site):
    cfg, sp = site
    _plant(sp, nvidia_smi="/opt/from-the-file")  # ours (0644, our uid): served, so this shows where it came from
    code = ("import sys; from slurmkit import nodesettings as n; s = n.load(); "
            "print(s.tools.nvidia_smi, 'yaml' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, SLURMKIT_CONFIG=str(cfg)))
    assert r.stdout.split() == ["/opt/from-the-file", "False"], r.stderr


def test_a_changed_yaml_is_parsed_never_served_stale(site):
    cfg, sp = site
    cfg.write_text(YAML.replace("expected: 8", "expected: 4"))
    assert nodesettings.load().gpu_count.expected == 4


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "other-owner", "symlink", "open-dir"])
def test_a_planted_or_writable_file_is_never_used(site, tmp_path, how):
    cfg, sp = site
    _plant(sp, nvidia_smi="/tmp/evil")
    if how == "group-writable":
        sp.chmod(0o664)
    elif how == "world-writable":
        sp.chmod(0o646)
    elif how == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(sp, 65534, 65534)
    elif how == "symlink":
        real = tmp_path / "elsewhere.json"
        sp.rename(real)
        sp.symlink_to(real)
    else:
        cfg.parent.chmod(0o777)  # anyone could swap the file in this directory
    assert nodesettings.load().tools.nvidia_smi == "/usr/bin/nvidia-smi"


def test_a_file_out_of_range_or_not_json_is_parsed_instead(site):
    cfg, sp = site
    doc = json.loads(sp.read_text())
    doc["settings"]["sync"]["keep"] = -3
    sp.write_text(json.dumps(doc))
    assert nodesettings.load().sync.keep == 2
    sp.write_text("{not json")
    assert nodesettings.load().sync.keep == 2


def test_install_refuses_a_config_that_does_not_load(tmp_path):
    with pytest.raises(UsageError) as e:
        nodesettings.render(b"sync:\n  kep: 2\n", "/etc/slurmkit/config.yaml")
    assert str(e.value) == "/etc/slurmkit/config.yaml:2: unknown key 'sync.kep'; did you mean 'keep'?"


def test_no_config_gives_the_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CONFIG", os.devnull)
    assert nodesettings.load() == config.load()  # the defaults, as every other command reads it
