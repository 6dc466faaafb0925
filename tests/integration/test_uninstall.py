"""`slurmkit install --uninstall` against real sshd "nodes" on loopback (dev/sshfleet.py), each under its own
install.root: everything install (and the hooks) put on a node goes, nothing of another node does, a rerun
changes nothing, and slurm.conf naming the hooks stops it. Runs with the dev cluster (for `scontrol show config`).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
from sshfleet import Fleet  # noqa: E402

BASE_PORT = int(os.environ.get("SLURMKIT_TEST_SSH_PORT", "7474")) + 30   # beside test_install/test_deploy_doc
NODES = ["n1", "n2"]

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server (bootstrap)")


def cli(config: Path, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_CONFIG"}
    r = subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(config), *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    doc = json.loads(r.stdout) if "--json" in args and r.stdout.strip().startswith("{") else None
    return r, doc


def everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path / "fleet", NODES, BASE_PORT).start()
    try:
        yield f
    finally:
        f.stop()


def write_site(tmp_path: Path, fleet: Fleet, **install) -> Path:
    state, logs, wrappers = tmp_path / "slurmkit-state", tmp_path / "slurmkit-logs", tmp_path / "wrappers"
    wrappers.mkdir(exist_ok=True)
    cfg = tmp_path / "site.yaml"
    extra = {"slurm_prolog": str(wrappers / "slurmkit-prolog"), "slurm_epilog": str(wrappers / "slurmkit-epilog"),
             **install}
    cfg.write_text(f"paths:\n  state_dir: {state}\n  health_log: {logs}/\n" + fleet.install_config(**extra))
    return cfg


@pytest.mark.compat("install")
def test_uninstall_takes_off_everything_of_that_node_only_and_a_rerun_changes_nothing(fleet, tmp_path):
    cfg = write_site(tmp_path, fleet)
    wrappers = tmp_path / "wrappers"
    for hook in ("prolog", "epilog"):   # as docs/deploy.md step 4 does
        r, _ = cli(cfg, "install", "--hook-wrapper", hook)
        (wrappers / f"slurmkit-{hook}").write_text(r.stdout)
    r, doc = cli(cfg, "install", "--nodes", "n[1-2]", "--json")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    # what the hooks leave on a node while they run (synthetic: written here as the hooks name them)
    state, logs = tmp_path / "slurmkit-state", tmp_path / "slurmkit-logs"
    state.mkdir()
    logs.mkdir()
    for n in NODES:
        for name in (f"xid-{n}.json", f"drain-{n}.lock", f"pending-drain-{n}.json"):
            (state / name).write_text("{}")
        (logs / f"{n}.jsonl").write_text('{"check": "xid"}\n')
        (logs / f"{n}.jsonl.1").write_text('{"check": "xid"}\n')
        run = fleet.node_root(n) / "run" / "slurmkit"
        run.mkdir(parents=True)
        (run / "settings.json").write_text("{}")
        hooks = fleet.node_root(n) / "etc" / "slurm" / "slurmkit"
        (hooks / ".prolog.slurmkit-tmp-deadbeef").write_text("a staged copy an interrupted install left\n")
    unit = fleet.node_root("n1") / "etc" / "systemd" / "system" / "slurmkit-agent.service"
    assert unit.exists() and "Restart=always" in unit.read_text()
    n2_before = everything(fleet.node_root("n2"))

    # a dry run says what would go and changes nothing
    before = everything(tmp_path)
    r, doc = cli(cfg, "install", "--nodes", "n1", "--uninstall", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert everything(tmp_path) == before
    (node,) = doc["nodes"]
    assert node["status"] == "would-change" and doc["uninstall"] is True
    removed = {c["path"] for c in node["changes"] if c["action"] == "remove"}
    root = fleet.node_root("n1")
    for p in ("etc/slurm/slurmkit/prolog", "etc/slurmkit/config.yaml", "etc/slurmkit/installed.json",
              "etc/systemd/system/slurmkit-agent.service", "opt/slurmkit/venv", "opt/slurmkit/wheels", "run/slurmkit",
              "etc/slurm/slurmkit/.prolog.slurmkit-tmp-deadbeef"):
        assert str(root / p) in removed, p
    assert {str(state / "xid-n1.json"), str(wrappers / "slurmkit-prolog")} <= removed
    assert str(state / "xid-n2.json") not in removed and str(logs / "n1.jsonl") not in removed
    assert "kept " + str(logs / "n1.jsonl") in node["note"]

    r, doc = cli(cfg, "install", "--nodes", "n1", "--uninstall")
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.splitlines()[1].split()[:2] == ["n1", "removed"], r.stdout
    assert "take out these lines" in r.stdout and f"Prolog={wrappers}/slurmkit-prolog" in r.stdout
    assert not root.exists(), everything(root)            # nothing left of the node's install, not even its root
    assert sorted(p.name for p in state.iterdir()) == ["drain-n2.lock", "pending-drain-n2.json", "xid-n2.json"]
    assert sorted(p.name for p in logs.iterdir()) == ["n1.jsonl", "n1.jsonl.1", "n2.jsonl", "n2.jsonl.1"]
    assert list(wrappers.iterdir()) == []                 # on a real node: that node's copy of the wrappers
    assert everything(fleet.node_root("n2")) == n2_before

    r, doc = cli(cfg, "install", "--nodes", "n1", "--uninstall", "--json")
    assert r.returncode == 0 and doc["nodes"][0]["status"] == "unchanged" and doc["nodes"][0]["changes"] == []

    r, doc = cli(cfg, "install", "--nodes", "n2", "--uninstall", "--remove-logs", "--json")
    assert r.returncode == 0 and doc["nodes"][0]["status"] == "removed", r.stderr
    assert not fleet.node_root("n2").exists()
    assert not state.exists()     # emptied, and named *slurmkit* (never /var/lib or /tmp): it goes too
    assert sorted(p.name for p in logs.iterdir()) == ["n1.jsonl", "n1.jsonl.1"]


@pytest.mark.compat("install")
def test_uninstall_is_refused_while_slurm_conf_names_the_hooks(fleet, tmp_path):
    show = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60).stdout
    from slurmkit.install.slurmconf import parse_show_config, scripts

    prolog = scripts(parse_show_config(show), "Prolog")[0]      # 24.11+ prints `Prolog[0] = ...`
    cfg = write_site(tmp_path, fleet, slurm_prolog=prolog)   # the site named its hook path as slurm.conf does
    assert cli(cfg, "install", "--nodes", "n1", "--json")[0].returncode == 0
    before = everything(fleet.node_root("n1"))
    r, _ = cli(cfg, "install", "--nodes", "n1", "--uninstall")
    assert r.returncode == 1
    assert f"slurm.conf still names slurmkit's hooks (Prolog={prolog})" in r.stderr
    assert everything(fleet.node_root("n1")) == before
    r, doc = cli(cfg, "install", "--nodes", "n1", "--uninstall", "--dry-run", "--json")
    assert r.returncode == 0 and doc["slurm_conf"]["still_configured"] == [f"Prolog={prolog}"]
    # the cluster's own prolog is not the wrapper --hook-wrapper prints: kept, and said so
    assert f"kept {prolog} (slurm.conf's hook path" in doc["nodes"][0]["note"]
