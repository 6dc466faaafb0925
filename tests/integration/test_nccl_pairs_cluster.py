"""The NCCL pairs sweep on the real dev cluster (issue 33): `slurmkit health --sweep gpu --checks nccl-pairs` submits
one job per pair of nodes (a ring: n1-n2, n2-n3, n3-n4, n4-n1), the scheduler runs all_reduce_perf across each
pair (the fake replays the pair's first node's scenario from rank 0, as nccl-tests prints from rank 0 only), and
`--pairs-report` gives each pair's bus bandwidth, names the node whose every pair is slow, and maps a slow pair
whose nodes are fine elsewhere to its switch ports on a SYNTHETIC ibnetdiscover capture of the dev nodes.
The slow output is SYNTHETIC: the healthy scenario's real capture with its average bus bandwidth lowered."""
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit"))
from fabric_synth import synth_ibnetdiscover  # noqa: E402

pytestmark = pytest.mark.integration
SCENARIOS = REPO / "dev" / "fakegpu" / "scenarios"


def slow_scenario(tmp_path: Path, gbps: float) -> str:
    """healthy-h100x8 with all_reduce_perf's footer at `gbps` (SYNTHETIC), beside links to the other scenarios
    (what its responses reach as ../<scenario>/)."""
    root = tmp_path / "scenarios"
    if not root.exists():
        root.mkdir()
        for other in SCENARIOS.iterdir():
            (root / other.name).symlink_to(other)
    scen = root / "slow-nccl"
    shutil.copytree(SCENARIOS / "healthy-h100x8", scen, symlinks=True)
    src = (SCENARIOS / "healthy-h100x8" / "all_reduce_perf.txt").read_text()
    slow, n = re.subn(r"(# Avg bus bandwidth\s*:\s*)91\.019", lambda m: f"{m.group(1)}{gbps:.3f}", src)
    assert n == 1
    target = scen / "all_reduce_perf.txt"
    if target.is_symlink():
        target.unlink()
    target.write_text(slow)
    return str(scen)


def sweep(c, pairs_dir):
    r = c.slurmkit("health", "--sweep", "gpu", "--checks", "nccl-pairs", "--pairs-dir", str(pairs_dir), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [j["pair"] for j in doc["jobs"]] == [["n1", "n2"], ["n2", "n3"], ["n3", "n4"], ["n4", "n1"]]
    ids = [j["job_id"] for j in doc["jobs"]]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = [c.job_state(j) for j in ids]
        if all(s in ("COMPLETED", "FAILED") for s in states):
            break
        time.sleep(0.5)
    assert states == ["COMPLETED"] * 4, states
    return c.slurmkit("health", "--pairs-report", "--pairs-dir", str(pairs_dir), "--json")


def test_the_node_whose_every_pair_is_slow_is_named(clean, tmp_path):
    c = clean
    c.set_scenario("n1", slow_scenario(tmp_path, 30.0))
    dry = c.slurmkit("health", "--sweep", "n[1-3]", "--checks", "nccl-pairs", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    script = json.loads(dry.stdout)["jobs"][0]["script"]
    assert "#SBATCH --nodelist=n1,n2" in script and "#SBATCH --exclusive" in script
    assert "exec srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 " in script
    r = sweep(c, tmp_path / "pairs")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {f"{p['a']}-{p['b']}": p["busbw"] for p in doc["pairs"]} == {
        "n1-n2": 30.0, "n2-n3": 91.019, "n3-n4": 91.019, "n4-n1": 30.0}
    assert [n["node"] for n in doc["bad_nodes"]] == ["n1"] and doc["bad_pairs"] == []
    assert doc["reference_gbps"] == 91.019 and doc["reference_source"] == "the best of 4 pairs"


def test_a_slow_pair_whose_nodes_are_fine_elsewhere_names_its_switch_ports(clean, tmp_path):
    c = clean
    c.set_scenario("n2", slow_scenario(tmp_path, 40.0))   # n2 is rank 0 of n2-n3 only: that pair alone is slow
    ib = tmp_path / "ibnetdiscover-synthetic.txt"
    ib.write_text(synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3", "n4"]}, ["spine1"]))
    pairs_dir = tmp_path / "pairs"
    assert sweep(c, pairs_dir).returncode == 1
    r = c.slurmkit("health", "--pairs-report", "--pairs-dir", str(pairs_dir), "--ibnetdiscover", str(ib))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert "pair n1-n2: ok (91.019 GB/s)" in lines
    assert any(ln.startswith("pair n2-n3 slow, its nodes fine with other partners: 40 GB/s < 0.8 x 91.019")
               for ln in lines), r.stdout
    assert "  host port: leaf1[2] - n2 mlx5_0[1] 4xEDR" in lines and "  host port: leaf2[1] - n3 mlx5_0[1] 4xEDR" in lines
    assert sum(ln.startswith("  uplink: ") and "spine1" in ln for ln in lines) == 2, r.stdout
    # no sweep in a directory: bad input, said as such
    none = c.slurmkit("health", "--pairs-report", "--pairs-dir", str(tmp_path / "nothing"))
    assert none.returncode == 2 and "no pairs sweep here" in none.stderr
