"""The hook agent's systemd unit that `slurmkit install` puts on each node: systemd accepts it (systemd-analyze
verify), it starts this node's venv Python on the hooks' socket with this node's site config, whatever characters
the install paths hold, and a site that does not want the agent gets no unit."""
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkit import config
from slurmkit.agent.client import DEFAULT_SOCKET
from slurmkit.install.bundle import Wheelhouse, _unit_word, agent_unit_text, artifacts
from slurmkit.install.layout import layout


def _unquote(word: str, *, expands: bool = False) -> str:
    """What systemd makes of one double-quoted word (systemd.syntax(7), systemd.unit(5) specifiers)."""
    assert word[0] == word[-1] == '"'
    out, i, body = [], 0, word[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\":
            out.append(body[i + 1])
            i += 2
        elif c == "%":
            assert body[i + 1] == "%", f"an unescaped specifier in {word!r}"
            out.append("%")
            i += 2
        elif c == "$" and expands:
            assert body[i + 1] == "$", f"an unescaped variable in {word!r}"
            out.append("$")
            i += 2
        else:
            assert c != '"', word
            out.append(c)
            i += 1
    return "".join(out)


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\0"), min_size=1, max_size=40),
       st.booleans())
def test_a_unit_word_reaches_the_process_unchanged(v, expands):
    assert _unquote(_unit_word(v, expands=expands), expands=expands) == v


def test_a_newline_is_refused():
    from slurmkit.errors import UsageError

    with pytest.raises(UsageError, match="newline"):
        _unit_word("/a\nb")


def _lay(tmp_path, extra=""):
    s = config.loads(f"install:\n  root: {tmp_path}/r\n{extra}").install
    return layout(s, "n1")


def test_the_unit_runs_the_agent_of_this_install(tmp_path):
    lay = _lay(tmp_path)
    assert lay.agent_unit == f"{tmp_path}/r/etc/systemd/system/slurmkit-agent.service"
    text = agent_unit_text(lay).decode()
    lines = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and not ln.startswith("#"))
    assert lines["ExecStart"].split(" ")[0] == f'"{lay.python}"'
    assert f'"--socket" "{DEFAULT_SOCKET}"' in lines["ExecStart"]
    assert _unquote(lines["Environment"]) == f"SLURMKIT_CONFIG={lay.config}"
    assert lines["KillMode"] == "process"  # a restart never kills a hook in flight or a job's sampler


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze on this machine")
def test_systemd_accepts_the_unit_even_for_awkward_paths(tmp_path):
    venv = tmp_path / "v env %n $HOME"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    s = config.loads(f"install:\n  venv_dir: '{venv}'\n  config_path: /etc/slurmkit/c %n $X.yaml\n").install
    lay = layout(s, "n1")
    assert lay.python == f"{venv}/bin/python"
    unit = tmp_path / "slurmkit-agent.service"
    unit.write_bytes(agent_unit_text(lay))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "slurmkit-agent.service" not in r.stderr, r.stderr


def test_the_unit_is_installed_unless_the_site_says_no(tmp_path):
    (tmp_path / "slurmkit-0.1.0-py3-none-any.whl").write_bytes(b"sk")
    wh = Wheelhouse(tmp_path, tuple(tmp_path.glob("*.whl")), "0.1.0")
    hook = b"#!/bin/sh\nexit 0\n"
    roles = [a.role for a in artifacts(_lay(tmp_path), wh, hook, hook, b"")]
    assert "agent-unit" in roles and roles[-1] == "stamp"
    off = _lay(tmp_path, '  agent_unit: ""\n')
    assert off.agent_unit == ""
    assert "agent-unit" not in [a.role for a in artifacts(off, wh, hook, hook, b"")]
