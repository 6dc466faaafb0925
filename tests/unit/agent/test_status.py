"""`slurmkit agent status` against a real agent process (slurmkit/agent/server.py): running and answering (its pid,
start, hooks served), stopped, killed (its socket file left), a listener that never answers; and the per-cluster
socket (agent.socket's {cluster}: slurm.conf's ClusterName) that the agent and the hooks both find."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.agent import client as hookclient
from unit.agent.test_server import Agent, _config, _env, _hook, _silent_listener, _site

REPO = Path(__file__).resolve().parents[3]


def _status(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SLURMKIT_CONFIG=str(tmp_path / "slurmkit.yaml"))
    return subprocess.run([sys.executable, "-m", "slurmkit", "agent", "status", *args], env=env, cwd=str(REPO),
                          capture_output=True, text=True, timeout=60)


def _json(r: subprocess.CompletedProcess) -> dict:
    return json.loads(r.stdout)


def test_status_of_a_running_agent_then_stopped(tmp_path):
    _config(tmp_path)
    a = Agent(tmp_path)
    try:
        site = _site(tmp_path / "s")
        for job in (31, 32):
            assert _hook("prolog", _env(site, job, sock=a.sock)).returncode == 0
        deadline = time.monotonic() + 10
        while True:  # the agent writes its counts at most once a second
            r = _status(tmp_path, "--socket", str(a.sock), "--json")
            if r.returncode != 0 or _json(r).get("hooks_served") == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.returncode == 0, (r.stdout, r.stderr)
        doc = _json(r)
        assert doc["state"] == "answering" and doc["pid"] == a.pid
        assert doc["hooks_served"] == 2 and doc["dropped"] == 0 and doc["last_error"] is None
        assert 0 <= doc["uptime_s"] < 300
        text = _status(tmp_path, "--socket", str(a.sock))
        assert text.returncode == 0
        assert f"agent: running, answering on {a.sock} (pid {a.pid})" in text.stdout
        assert "hooks served: 2;" in text.stdout
    finally:
        a.stop()
    r = _status(tmp_path, "--socket", str(a.sock))
    assert r.returncode == 1
    assert f"agent: NOT RUNNING: no socket at {a.sock}" in r.stdout


def test_status_of_a_killed_agent_and_of_a_listener_that_never_answers(tmp_path):
    _config(tmp_path)
    a = Agent(tmp_path)
    a.stop(signal.SIGKILL)
    r = _status(tmp_path, "--socket", str(a.sock), "--json")
    assert r.returncode == 1
    doc = _json(r)
    assert doc["state"] == "not running" and "nobody listens" in doc["detail"] and str(a.sock) in doc["detail"]
    assert doc["stale_status"]["pid"] == a.pid  # what it left: its last counts
    sock = tmp_path / "silent" / "agent.sock"
    srv = _silent_listener(sock)
    try:
        r = _status(tmp_path, "--socket", str(sock), "--timeout", "0.5")
        assert r.returncode == 1
        assert f"agent: NOT ANSWERING: no answer on {sock} within 0.5 s" in r.stdout
    finally:
        srv.close()


def test_status_finds_the_site_socket_with_this_clusters_name(tmp_path):
    """agent.socket with {cluster} (the default's form): the agent, a hook and `agent status` all take slurm.conf's
    ClusterName, so two clusters' agents on one host never share a socket."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=alpha\nPrologEpilogTimeout=60\n")
    template = f"{tmp_path}/run/{{cluster}}/agent.sock"
    _config(tmp_path)
    with open(tmp_path / "slurmkit.yaml", "a") as f:
        f.write(f"agent:\n  enabled: true\n  socket: {template}\n")
    a = Agent(tmp_path, env={"SLURM_CONF": str(conf)}, sock=template)
    a.sock = tmp_path / "run" / "alpha" / "agent.sock"
    try:
        assert a.sock.exists(), a.lines()
        site = _site(tmp_path / "s")
        env = dict(_env(site, 41, sock=template), SLURM_CONF=str(conf))
        assert _hook("prolog", env).returncode == 0
        assert any("prolog job 41 node n1: exit 0" in ln for ln in a.lines()), a.lines()
        r = subprocess.run([sys.executable, "-m", "slurmkit", "agent", "status", "--json"], cwd=str(REPO),
                           env=dict(os.environ, SLURMKIT_CONFIG=str(tmp_path / "slurmkit.yaml"), SLURM_CONF=str(conf)),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert _json(r)["socket"] == str(a.sock)
    finally:
        a.stop()


def test_the_socket_path_takes_the_cluster_name():
    e = hookclient.expand_socket
    assert e(b"/run/slurmkit/{cluster}/agent.sock", {b"clustername": b"alpha"}) == b"/run/slurmkit/alpha/agent.sock"
    assert e(b"/run/slurmkit/{cluster}/agent.sock", {}) == hookclient.LEGACY_SOCKET.encode()
    assert e(b"/run/slurmkit/{cluster}/agent.sock", {b"clustername": b"../x"}) == hookclient.LEGACY_SOCKET.encode()
    assert e(b"/x/a.sock", {b"clustername": b"alpha"}) == b"/x/a.sock"
    assert hookclient.socket_path({}, {b"clustername": b"beta"}) == b"/run/slurmkit/beta/agent.sock"


def test_the_agent_socket_setting_is_checked():
    assert config.loads("").agent.socket == hookclient.DEFAULT_SOCKET
    assert config.loads("").agent.enabled is False
    with pytest.raises(Exception, match="socket"):
        config.loads("agent:\n  socket: run/agent.sock\n")


@pytest.mark.parametrize("enabled", [True, False])
def test_the_installed_hook_finds_the_sites_socket(tmp_path, enabled):
    """install's preamble carries agent.socket into the hook (the client cannot read the YAML): with nothing in the
    environment, the installed prolog reaches the agent on the site's socket; without agent.enabled it never tries."""
    from slurmkit.install.bundle import hook_text
    from slurmkit.install.layout import layout

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=beta\nPrologEpilogTimeout=60\n")  # synthetic: the keys the hook client reads
    template = f"{tmp_path}/run/{{cluster}}/agent.sock"
    s = config.loads(f"agent:\n  enabled: {str(enabled).lower()}\n  socket: {template}\n")
    hook = tmp_path / "hooks" / "prolog"
    hook.parent.mkdir()
    hook.write_bytes(hook_text((REPO / "prolog" / "prolog").read_bytes(), layout(s.install, "n1", s.agent)))
    hook.chmod(0o755)
    _config(tmp_path)
    a = Agent(tmp_path, env={"SLURM_CONF": str(conf)}, sock=template)
    try:
        env = dict(_env(_site(tmp_path / "s"), 51), SLURM_CONF=str(conf))
        del env["SLURMKIT_AGENT_SOCKET"]
        r = subprocess.run([str(hook)], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        served = [ln for ln in a.lines() if "prolog job 51 node n1: exit 0" in ln]
        assert len(served) == (1 if enabled else 0), a.lines()
    finally:
        a.stop()


def test_an_agent_started_under_its_old_module_path_still_serves(tmp_path):
    """An agent started before the move (`-m slurmkit.hooks.agent`, an older unit file) re-executes itself under
    that name after an upgrade: the name runs the agent (slurmkit/agent/server.py), which serves the hooks."""
    _config(tmp_path)
    sock = tmp_path / "old" / "agent.sock"
    proc = subprocess.Popen([sys.executable, "-I", "-m", "slurmkit.hooks.agent", "--socket", str(sock)], cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "old.log", "wb"))
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "old.log").read_text()
            time.sleep(0.05)
        assert _hook("prolog", _env(_site(tmp_path / "s"), 61, sock=sock)).returncode == 0
        assert "prolog job 61 node n1: exit 0" in (tmp_path / "old.log").read_text()
        assert _status(tmp_path, "--socket", str(sock)).returncode == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
