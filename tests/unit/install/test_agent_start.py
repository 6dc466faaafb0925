"""`slurmkit install` and the hook agent (agent.enabled): where systemd runs the node the unit is enabled and
started (restarted when its file changed), with the install's timeout; where it does not, install says how to run
it; a site without agent.enabled gets no unit enabled. No systemd runs here: the argv sent to the node is what is
checked (as tests/unit/install/test_uninstall.py does for the stop)."""
import pytest

from slurmkit import config
from slurmkit.install import agentunit
from slurmkit.install.layout import layout
from slurmkit.install.plan import Change, RemoteFile
from slurmkit.install.push import NodeResult
from slurmkit.install.ssh import NodeError, RunResult

UNIT = "/etc/systemd/system/slurmkit-agent.service"


class Node:
    """A node's transport that records each command (`rc`: exit codes by argv prefix)."""

    def __init__(self, systemd=True, rc=None):
        self.systemd, self.rc, self.argvs, self.timeouts = systemd, rc or {}, [], []

    def stat(self, path):
        return RemoteFile(path, self.systemd, "dir" if self.systemd else "missing")

    def run(self, argv, timeout=None):
        self.argvs.append(list(argv))
        self.timeouts.append(timeout)
        code = next((c for k, c in self.rc.items() if tuple(argv[: len(k)]) == k), 0)
        return RunResult(tuple(argv), code, "", "Failed to start unit" if code else "")


def _lay(enabled=True, extra=""):
    s = config.loads(f"agent:\n  enabled: {'true' if enabled else 'false'}\n{extra}")
    return layout(s.install, "gpu001", s.agent)


def _res(status="changed", unit_changed=False):
    r = NodeResult("gpu001", status)
    r.changes = [Change("update", UNIT)] if unit_changed else [Change("update", "/etc/slurm/slurmkit/prolog")]
    return r


def test_a_changed_unit_is_reloaded_enabled_and_restarted():
    t, r = Node(), _res(unit_changed=True)
    agentunit.ensure_agent(t, _lay(), r, False, 7.0)
    assert t.argvs == [["systemctl", "daemon-reload"], ["systemctl", "enable", "slurmkit-agent.service"],
                       ["systemctl", "restart", "slurmkit-agent.service"]]
    assert set(t.timeouts) == {7.0}
    assert r.changes[-1].action == "start-agent" and r.status == "changed"


def test_a_stopped_agent_is_enabled_and_started_and_a_running_one_left_alone():
    t, r = Node(rc={("systemctl", "is-active"): 3}), _res("unchanged")
    agentunit.ensure_agent(t, _lay(), r, False, 5.0)
    assert t.argvs[-1] == ["systemctl", "enable", "--now", "slurmkit-agent.service"]
    assert r.status == "changed"
    t, r = Node(), _res("unchanged")
    agentunit.ensure_agent(t, _lay(), r, False, 5.0)
    assert [a[1] for a in t.argvs] == ["is-enabled", "is-active"] and r.status == "unchanged"


def test_a_dry_run_says_it_would_start_the_agent_and_runs_nothing():
    t, r = Node(), _res("would-change", unit_changed=True)
    agentunit.ensure_agent(t, _lay(), r, True, 5.0)
    assert t.argvs == [] and r.changes[-1].action == "start-agent"


def test_a_site_without_the_agent_gets_no_unit_enabled():
    t, r = Node(), _res(unit_changed=True)
    agentunit.ensure_agent(t, _lay(enabled=False), r, False, 5.0)
    assert t.argvs == [] and all(c.action != "start-agent" for c in r.changes)


def test_without_systemd_install_says_how_to_run_the_agent():
    t, r = Node(systemd=False), _res()
    agentunit.ensure_agent(t, _lay(extra="  socket: /run/sk/{cluster}/a.sock\n"), r, False, 5.0)
    assert t.argvs == []
    assert r.note == ("no systemd on the node: run the hook agent as root: SLURMKIT_CONFIG=/etc/slurmkit/config.yaml "
                      "/opt/slurmkit/venv/bin/python -I -m slurmkit.agent.server --socket '/run/sk/{cluster}/a.sock'")


def test_a_unit_that_does_not_start_fails_the_node_loudly():
    t, r = Node(rc={("systemctl", "restart"): 1}), _res(unit_changed=True)
    with pytest.raises(NodeError, match="systemctl restart slurmkit-agent.service: Failed to start unit"):
        agentunit.ensure_agent(t, _lay(), r, False, 5.0)


def test_the_unit_runs_the_agent_on_the_sites_socket():
    from slurmkit.install.bundle import agent_unit_text

    text = agent_unit_text(_lay(extra="  socket: /run/sk/{cluster}/a.sock\n")).decode()
    assert '"--socket" "/run/sk/{cluster}/a.sock"' in text
