"""Per-node settings end to end: a site config with `overrides:` installed to real sshd "nodes" (dev/sshfleet.py);
each node gets its merged config, the override takes effect on its node only (the installed slurmkit's own
check, run by --verify against the dev cluster's fake GPUs), and `slurmkit config --node` says where each value
came from. Features are asked from the real Slurm (sinfo)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
from sshfleet import Fleet  # noqa: E402

BASE_PORT = int(os.environ.get("SLURMKIT_TEST_SSH_PORT", "7474")) + 40
NODES = ["n1", "n2"]

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server (bootstrap)")


def cli(config: Path, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_CONFIG"}
    r = subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(config), *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    doc = json.loads(r.stdout) if "--json" in args and r.stdout.strip().startswith("{") else None
    return r, doc


@pytest.mark.compat("install")
def test_an_override_takes_effect_on_its_node_only(clean, tmp_path):
    c = clean
    fleet = Fleet(tmp_path / "fleet", NODES, BASE_PORT).start()
    try:
        doc = yaml.safe_load(c.site_config.read_text())
        fake = REPO / "dev" / "fakegpu" / "bin"
        env = ["env", f"SLURMKIT_FAKEGPU_DIR={c.dir / 'fakegpu'}"]
        doc["tools"] = {t: [*env, str(fake / t.replace("nvidia_smi", "nvidia-smi"))]
                        for t in ("nvidia_smi", "dmesg", "all_reduce_perf", "dcgmi")}
        doc["install"] = yaml.safe_load(fleet.install_config())["install"]
        doc["overrides"] = [{"nodes": "n2", "set": {"gpu_count": {"expected": 4}}},
                            {"features": ["no-such-feature"], "set": {"gpu_count": {"expected": 1}}}]
        cfg = tmp_path / "site.yaml"
        cfg.write_text(yaml.safe_dump(doc, sort_keys=False))

        r, rep = cli(cfg, "install", "--nodes", "n[1-2]", "--verify", "--json")
        nodes = {n["node"]: n for n in rep["nodes"]}
        assert nodes["n1"]["ok"] and nodes["n1"]["status"] == "changed", nodes["n1"]
        assert not nodes["n2"]["ok"] and "gpu_count" in nodes["n2"]["verify"]["why"], nodes["n2"]
        assert r.returncode == 1
        got = {n: yaml.safe_load((fleet.node_root(n) / "etc/slurmkit/config.yaml").read_text()) for n in NODES}
        assert got["n2"]["gpu_count"]["expected"] == 4 and got["n1"]["gpu_count"].get("expected") == 8
        assert "overrides" not in got["n1"] and "overrides" not in got["n2"]
        # each node's settings file is made from its own config: the hooks on n2 see the override without YAML
        made = {n: json.loads((fleet.node_root(n) / "etc/slurmkit/config.settings.json").read_text()) for n in NODES}
        assert made["n2"]["settings"]["gpu_count"]["expected"] == 4
        assert made["n1"]["settings"]["gpu_count"]["expected"] == 8
        head = (fleet.node_root("n2") / "etc/slurmkit/config.yaml").read_text().splitlines()[0]
        assert head == f"# written by `slurmkit install` for node n2 from {cfg}: the site config with " \
                       "overrides[0] nodes n2 applied."

        r, shown = cli(cfg, "config", "--node", "n2", "--json")
        assert r.returncode == 0, r.stderr
        line = next(i for i, ln in enumerate(cfg.read_text().splitlines(), 1) if "expected: 4" in ln)
        assert shown["settings"]["gpu_count.expected"] == {
            "value": 4, "source": f"{cfg}:{line} (overrides[0] nodes n2)"}
        assert shown["features"] == []                       # the dev cluster's nodes have none (sinfo %f)
        r, _ = cli(cfg, "config", "--node", "n1", "--changed")
        row = next(ln for ln in r.stdout.splitlines() if ln.startswith("gpu_count.expected "))
        assert row.split()[1:] == ["8", f"{cfg}:{next(i for i, ln in enumerate(cfg.read_text().splitlines(), 1) if 'expected: 8' in ln)}"]
    finally:
        fleet.stop()
