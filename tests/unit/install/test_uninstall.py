"""The uninstall plan (pure) and its order on a node, where a real systemd cannot run here: the argv it sends."""
from slurmkit.install import uninstall as un
from slurmkit.install.layout import layout
from slurmkit.install.plan import RemoteFile
from slurmkit.install.ssh import RunResult
from slurmkit.settings import InstallSettings


def view(systemd: bool, exists: set[str], listings=None):
    lay = layout(InstallSettings(), "gpu001")
    remote = {p: RemoteFile(p, p in exists, "dir" if p.endswith(("slurmkit", "system")) else "file")
              for p in un.candidates(lay, lay.run_dir, "/var/lib/slurmkit", "/var/log/slurmkit/health/", {})}
    return un.NodeView(lay, lay.run_dir, "/var/lib/slurmkit", "/var/log/slurmkit/health/", {}, remote,
                       listings or {}, {}, systemd)


class Recorder:
    node, is_root = "gpu001", True

    def __init__(self):
        self.argvs = []

    def run(self, argv, timeout=None):
        self.argvs.append(list(argv))
        return RunResult(tuple(argv), 0, "", "")


def test_with_systemd_the_agent_is_stopped_first_and_systemd_reloaded_last():
    unit = "/etc/systemd/system/slurmkit-agent.service"
    v = view(True, {unit, "/etc/slurm/slurmkit/prolog", "/etc/slurmkit/installed.json", "/opt/slurmkit/venv"},
             {"/opt/slurmkit": ["venv", "venv-0123abcd4567", "venv.slurmkit-prev", "wheels", "other"]})
    pl = un.plan_uninstall(v)
    assert (pl.changes[0].action, pl.stop_unit) == ("stop-agent", "slurmkit-agent.service")
    assert "/opt/slurmkit/venv-0123abcd4567" in pl.trees and "/opt/slurmkit/other" not in pl.trees + pl.files
    t = Recorder()
    un.run_uninstall(t, pl, 10)
    assert t.argvs[0] == ["systemctl", "disable", "--now", "slurmkit-agent.service"]
    assert t.argvs[-1] == ["systemctl", "daemon-reload"]
    rm = [a for a in t.argvs if a[0] == "rm"]
    assert rm[-1] == ["rm", "-f", "--", "/etc/slurmkit/installed.json"]   # the stamp goes last
    rmdir = next(a for a in t.argvs if a[0] == "rmdir")
    # only directories of slurmkit's own: never /etc/systemd/system, /etc/slurm, /opt, /var/lib
    assert set(rmdir[3:]) == {"/etc/slurm/slurmkit", "/etc/slurmkit", "/opt/slurmkit", "/run/slurmkit",
                              "/var/lib/slurmkit", "/var/lib/slurmkit/efficiency", "/var/lib/slurmkit/sync-jobs",
                              "/var/log/slurmkit", "/var/log/slurmkit/health"}


def test_without_systemd_the_unit_file_goes_and_nothing_is_stopped():
    unit = "/etc/systemd/system/slurmkit-agent.service"
    pl = un.plan_uninstall(view(False, {unit}))
    assert pl.stop_unit is None and unit in pl.files and "no systemd" in pl.notes[0]


def test_a_node_without_slurmkit_has_nothing_to_do():
    pl = un.plan_uninstall(view(True, set()))
    assert not pl.changed and pl.dirs == []


def test_state_and_log_names_are_the_nodes_own_only():
    assert un.state_name("xid-gpu001.json", "gpu001") and un.state_name("pending-drain-gpu001.json", "gpu001")
    assert not un.state_name("xid-gpu0011.json", "gpu001") and not un.state_name("xid-gpu001.json.bak", "gpu001")
    assert un.log_name("gpu001.jsonl.3", "gpu001") and not un.log_name("gpu0010.jsonl", "gpu001")
