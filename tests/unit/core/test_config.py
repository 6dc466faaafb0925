import textwrap

import pytest

from slurmkit import config
from slurmkit.errors import UsageError


def load(text):
    return config.loads(textwrap.dedent(text), "/etc/slurmkit/config.yaml")


def test_empty_config_gives_defaults():
    s = load("")
    assert s.slurm.timeout == 10.0 and s.slurm.backend == "auto"
    assert s.drain.prefix == "slurmkit:"


@pytest.mark.parametrize("text", ["", "\n", "  \n\n"])
def test_no_document_is_the_defaults_as_yaml_reads_them_without_pyyaml(text):
    import subprocess
    import sys
    assert load(text) == load("# only a comment\n")          # what PyYAML makes of "no document", source and all
    code = f"import sys; from slurmkit import config; config.loads({text!r}, '/dev/null'); print('yaml' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout == "False\n"


def test_values_and_lines_are_kept():
    s = load("""
        slurm:
          timeout: 3
          backend: cli
        tools:
          nvidia_smi: /usr/bin/nvidia-smi
        """)
    assert s.slurm.timeout == 3.0 and isinstance(s.slurm.timeout, float)
    assert s.slurm.backend == "cli"
    assert s.tools.nvidia_smi == "/usr/bin/nvidia-smi"
    assert s.lines["slurm.timeout"] == 3


def test_syntax_error_names_file_and_line():
    with pytest.raises(UsageError) as e:
        load("""
            slurm:
              timeout: 3
             backend: cli
            """)
    assert e.value.exit_code == 2
    assert str(e.value).startswith("/etc/slurmkit/config.yaml:4: YAML syntax error")


def test_unknown_key_suggests_the_closest():
    with pytest.raises(UsageError) as e:
        load("""
            slurm:
              timout: 3
            """)
    assert str(e.value) == "/etc/slurmkit/config.yaml:3: unknown key 'slurm.timout'; did you mean 'timeout'?"


def test_unknown_section_lists_the_valid_ones():
    with pytest.raises(UsageError) as e:
        load("zzz: 1\n")
    assert "unknown key 'zzz'" in str(e.value) and "slurm" in str(e.value)
    assert ":1:" in str(e.value)


@pytest.mark.parametrize("text,line,expected", [
    ("slurm:\n  timeout: soon\n", 2, "slurm.timeout: expected a number, got a string ('soon')"),
    ("slurm:\n  backend: pyslrum\n", 2, "did you mean 'pyslurm'?"),
    ("slurm: 5\n", 1, "slurm: expected a mapping, got an integer"),
    ("tools:\n  nvidia_smi: {a: b}\n", 2, "tools.nvidia_smi: expected a string or a list, got a mapping"),
])
def test_wrong_types_name_the_key_and_line(text, line, expected):
    with pytest.raises(UsageError) as e:
        config.loads(text, "site.yaml")
    assert str(e.value).startswith(f"site.yaml:{line}: ")
    assert expected in str(e.value)


def test_string_settings_keep_the_text_as_written():
    # a version pin like 12.10 must not become the float 12.1
    s = load("paths:\n  state_dir: 12.10\n")
    assert s.paths.state_dir == "12.10"


def test_missing_default_config_means_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMKIT_CONFIG", raising=False)
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "absent.yaml"))
    assert config.load().slurm.timeout == 10.0


def test_missing_requested_config_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(UsageError, match="nope.yaml: config file not found"):
        config.load()


def test_a_tool_is_a_path_or_an_argv_prefix_its_arguments_follow():
    from slurmkit.proc import tool
    s = config.loads("tools:\n  nvidia_smi: /opt/a b/nvidia-smi\n"
                     "  dmesg: [env, SLURMKIT_FAKEGPU_SCENARIO=/s, /opt/fake/dmesg]\n")
    assert tool(s.tools.nvidia_smi, "-q") == ["/opt/a b/nvidia-smi", "-q"]      # a path is never split
    assert tool(s.tools.dmesg) == ["env", "SLURMKIT_FAKEGPU_SCENARIO=/s", "/opt/fake/dmesg"]
