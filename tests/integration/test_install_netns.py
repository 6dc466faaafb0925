"""`slurmkit install` to separate hosts: each node a network namespace of its own (veth pair, its own sshd on port
22, a 20 ms round trip), made and removed by the test (dev/netfleet.py). These are the project's own test hosts;
no traffic leaves this machine."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
from netfleet import NetFleet, available  # noqa: E402

NODES = ["h1", "h2", "h3", "h4"]
WHY = available() if os.geteuid() == 0 else "needs root"

pytestmark = [pytest.mark.skipif(WHY is not None and not os.environ.get("CI"), reason=f"no netns here: {WHY}"),
              pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server (bootstrap)")]


@pytest.fixture
def fleet(tmp_path):
    assert WHY is None, f"CI must be able to make network namespaces: {WHY}"
    f = NetFleet(tmp_path / "fleet", NODES, block=46, delay_ms=10).start()
    try:
        yield f
    finally:
        f.stop()


def install(cfg, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMKIT_CONFIG", "SLURM_CONF")}
    r = subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(cfg),
                        "install", *args], capture_output=True, text=True, timeout=600, env=env)
    return r, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else None)


def test_install_reaches_hosts_across_a_network_and_a_rerun_changes_nothing(fleet, tmp_path):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    assert all(fleet.ns[n] in out for n in NODES)                    # four separate network stacks
    cfg = tmp_path / "site.yaml"
    cfg.write_text("slurm:\n  timeout: 10\n" + fleet.install_config(parallel=4))
    r, doc = install(cfg, "--nodes", "h[1-4]", "--json")
    assert r.returncode == 0, r.stderr
    assert doc["summary"]["ok"] == 4 and doc["summary"]["failed"] == 0
    for n in NODES:
        assert (fleet.node_root(n) / "etc/slurm/slurmkit/prolog").exists()
    r, doc = install(cfg, "--nodes", "h[1-4]", "--json")
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in doc["nodes"]] == ["unchanged"] * 4


def test_a_host_that_is_gone_fails_alone(fleet, tmp_path):
    cfg = tmp_path / "site.yaml"
    cfg.write_text("slurm:\n  timeout: 10\n" + fleet.install_config(parallel=4, connect_timeout=3))
    fleet._stop_one("h3")                                           # the host's sshd is down
    r, doc = install(cfg, "--nodes", "h[1-4]", "--json")
    assert r.returncode == 1
    by = {x["node"]: x for x in doc["nodes"]}
    assert by["h3"]["status"] == "failed" and all(by[n]["status"] == "changed" for n in ("h1", "h2", "h4"))
    assert doc["summary"]["failed"] == 1
