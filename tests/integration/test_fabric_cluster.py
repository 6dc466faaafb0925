"""`slurmkit fabric` against real slurmctld (issue 33), on every Slurm version: a topology.conf generated from a
SYNTHETIC ibnetdiscover of the dev cluster's nodes (tests/unit/fabric_synth.py: n1 and n3 under leaf1, n2 under
leaf2, spine1 above both) starts a cluster of its own (dev/cluster.py up --topology-conf), `scontrol show
topology` lists its switches, and a 2-node job with --switches=1 lands under one leaf: n1 and n3, never the
n[1-2] Slurm picks without a topology; `slurmkit submit` of a 2-node spec with the site's submit.placement on asks
for --switches=1@WAIT (--segment=2 on topology/block) itself and lands there too. On 25.05+ the same tree as topology.yaml does the same; on 23.11+ a
topology/block file from synthetic GB200-style `nvidia-smi -q` captures (NVLink domains) keeps the job in one
block."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.fabric import placement

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit"))
from fabric_synth import synth_ibnetdiscover, synthetic_nvl, with_fabric  # noqa: E402

# +7 slurmctld, +8..+11 the slurmd (3, or 4 for the block case): +10/+11 are test_dev_cluster's, never up at the
# same time (tests run one at a time and each takes its cluster down)
PORT = int(os.environ.get("SLURMKIT_DEV_PORT", "6917")) + 7


def _generate(tmp_path, fmt):
    """topology.<fmt> from `slurmkit fabric`: fmt "conf"/"yaml" from a synthetic ibnetdiscover, "block" from
    synthetic GB200-style `nvidia-smi -q` captures (n1 and n3 in one NVLink domain, n2 and n4 in another)."""
    tmp_path.mkdir()
    if fmt == "block":
        q = tmp_path / "q"
        q.mkdir()
        a, b = "6f0e3a1c-5b2d-4c8e-9a7f-1d2e3f405162", "0a1b2c3d-0000-4000-8000-00000000beef"
        for node, (uuid, clique) in {"n1": (a, 1), "n3": (a, 1), "n2": (b, 2), "n4": (b, 2)}.items():
            (q / f"{node}.txt").write_text(synthetic_nvl(uuid, clique))
        args = ["--nvsmi-dir", str(q), "--topology-conf"]
    else:
        synth = tmp_path / "ibnetdiscover-synthetic.txt"
        synth.write_text(synth_ibnetdiscover({"leaf1": ["n1", "n3"], "leaf2": ["n2"]}, ["spine1"]))
        args = ["--ibnetdiscover", str(synth), f"--topology-{fmt}", "--slurm-nodes", "n[1-3]"]
    gen = subprocess.run([sys.executable, "-m", "slurmkit.cli", "fabric", *args], capture_output=True, text=True,
                         timeout=60)
    assert gen.returncode == 0, gen.stderr
    topo = tmp_path / f"topology.{'yaml' if fmt == 'yaml' else 'conf'}"
    topo.write_text(gen.stdout)
    return topo


def _up_and_place(cluster, tmp_path, fmt):
    topo = _generate(tmp_path, fmt)
    d = tmp_path / "c"
    dev = [sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(d)]
    option = "--topology-yaml" if fmt == "yaml" else "--topology-conf"
    nodes = "4" if fmt == "block" else "3"
    up = subprocess.run([*dev, "up", "--slurm", cluster.slurm, "--port", str(PORT), "--nodes", nodes, "--gpus", "1",
                         "--hooks", "true", option, str(topo)], capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))

        def run(*argv):
            r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 0, r.stderr
            return r.stdout

        show = run("scontrol", "show", "topology")
        if fmt == "block":
            lines = {ln.split()[0]: ln for ln in show.splitlines() if ln.startswith("BlockName=")}
            assert set(lines) == {"BlockName=nvl-6f0e3a1c-1", "BlockName=nvl-0a1b2c3d-2"}, show
            assert "Nodes=n[1,3]" in lines["BlockName=nvl-6f0e3a1c-1"]
            assert "Nodes=n[2,4]" in lines["BlockName=nvl-0a1b2c3d-2"]
            want = ["--segment=2"]
        else:
            lines = {ln.split()[0]: ln for ln in show.splitlines() if ln.startswith("SwitchName=")}
            assert set(lines) == {"SwitchName=leaf1", "SwitchName=leaf2", "SwitchName=spine1"}, show
            assert "Nodes=n[1,3]" in lines["SwitchName=leaf1"] and "Nodes=n2" in lines["SwitchName=leaf2"]
            assert "Switches=leaf[1-2]" in lines["SwitchName=spine1"]
            want = ["--switches=1"]
        # what submit would add (slurmkit/fabric/placement.py), read from this Slurm's own `scontrol show topology`
        topo = placement.parse_show_topology(show)
        assert topo.leaves == ({"nvl-6f0e3a1c-1": 2, "nvl-0a1b2c3d-2": 2} if fmt == "block"
                               else {"leaf1": 2, "leaf2": 1}), show
        opts, why = placement.decide(2, topo, enabled=True)
        assert opts == want, why
        assert placement.decide(3, topo, enabled=True)[0] == []      # 3 nodes fit in no leaf/block: nothing asked
        if fmt == "block":                                            # measured: Slurm refuses what decide() avoids
            refused = subprocess.run(["sbatch", "-N", "3", "--segment=2", "--wrap", "true"], capture_output=True,
                                     text=True, timeout=60, env=env)
            assert refused.returncode != 0
        job = run("sbatch", "--parsable", "-N", "2", *opts, "-o", "/dev/null", "--wrap", "sleep 1").strip()
        deadline = time.monotonic() + 60
        rec = ""
        while time.monotonic() < deadline:
            rec = run("scontrol", "-o", "show", "job", job.split(";")[0])
            if "JobState=RUNNING" in rec or "JobState=COMPLETED" in rec:
                break
            time.sleep(0.5)
        placed = next(f for f in rec.split() if f.startswith("NodeList="))
        # under one leaf (leaf1: the only one with 2 nodes), or inside one NVLink block (either)
        assert placed in (("NodeList=n[1,3]", "NodeList=n[2,4]") if fmt == "block" else ("NodeList=n[1,3]",)), rec
        _submit_places(tmp_path, env, fmt)
    finally:
        subprocess.run([*dev, "down"], capture_output=True, text=True, timeout=120)


def _submit_places(tmp_path, env, fmt):
    """`slurmkit submit` of a 2-node spec with the site's submit.placement on: the script asks for --switches (or
    --segment on topology/block), -v says why, and the job lands under one leaf (in one block); a 3-node job and
    a spec that opts out get nothing, and render says why."""
    site = tmp_path / "site.yaml"
    site.write_text("slurm:\n  timeout: 10\nsubmit:\n  placement: true\n  switch_wait: 60\n")
    spec = tmp_path / "two.yaml"
    spec.write_text(f"command: [sleep, '1']\nnodes: 2\ngpus_per_node: 1\noutput: /dev/null\nworkdir: {tmp_path}\n")
    skenv = dict(env, SLURMKIT_CONFIG=str(site))

    def slurmkit(*argv):
        return subprocess.run([sys.executable, "-m", "slurmkit.cli", *argv], capture_output=True, text=True,
                              timeout=120, env=skenv)

    opt, why = (("--segment=2", "2 nodes fit in one NVLink block (base block size 2): --segment=2") if fmt == "block"
                else ("--switches=1@1", "2 nodes fit under one leaf switch (the largest has 2): --switches=1@1"))
    r = slurmkit("-v", "submit", "--json", str(spec))
    assert r.returncode == 0, r.stderr
    assert f"slurmkit: placement: {why}" in r.stderr.splitlines(), r.stderr
    out = json.loads(r.stdout)
    assert f"#SBATCH {opt}\n" in out["script"] and f"# placement: {why}\n" in out["script"]
    deadline, rec = time.monotonic() + 60, ""
    while time.monotonic() < deadline and "JobState=RUNNING" not in rec and "JobState=COMPLETED" not in rec:
        time.sleep(0.5)
        rec = subprocess.run(["scontrol", "-o", "show", "job", str(out["job_id"])], capture_output=True, text=True,
                             timeout=60, env=env).stdout
    placed = next(f for f in rec.split() if f.startswith("NodeList="))
    assert placed in (("NodeList=n[1,3]", "NodeList=n[2,4]") if fmt == "block" else ("NodeList=n[1,3]",)), rec
    if fmt != "block":                                   # slurmctld kept the site's wait (switch_wait: 60)
        assert " Switches=1@00:01:00 " in rec, rec
    # render asks the same Slurm: 3 nodes fit no leaf or block, and a spec can opt out
    r = slurmkit("-v", "render", str(spec), "--set", "nodes=3")
    what = "NVLink block (the largest has 2)" if fmt == "block" else "leaf switch (the largest has 2)"
    assert r.returncode == 0 and f"slurmkit: placement: 3 nodes do not fit in one {what}: no placement asked" in (
        r.stderr.splitlines()), r.stderr
    assert "--switches" not in r.stdout and "--segment" not in r.stdout
    r = slurmkit("render", str(spec), "--set", "placement=false")
    assert r.returncode == 0 and opt not in r.stdout, r.stderr
    assert "# placement: the spec opts out of topology placement (placement: false)\n" in r.stdout


@pytest.mark.compat("dev cluster")  # a "fabric" capability row would need tests/conftest.py and the README
def test_generated_topology_file_starts_slurmctld_and_places_a_two_node_job_under_one_leaf(cluster, tmp_path):
    _up_and_place(cluster, tmp_path / "conf", "conf")
    if cluster.slurm != "22.05":                         # topology/block is Slurm 23.11+
        _up_and_place(cluster, tmp_path / "block", "block")
    if cluster.slurm not in ("22.05", "24.11"):          # topology.yaml is Slurm 25.05+
        _up_and_place(cluster, tmp_path / "yaml", "yaml")


@pytest.mark.compat("dev cluster")
def test_compare_slurm_asks_the_real_cluster_which_nodes_it_has(cluster, tmp_path):
    # SYNTHETIC fabric: n1-n3 of the dev cluster and a gpu9 Slurm does not have; n4 is missing from the fabric
    synth = tmp_path / "ibnetdiscover-synthetic.txt"
    synth.write_text(synth_ibnetdiscover({"leaf1": ["n1", "n3"], "leaf2": ["n2", "gpu9"]}, ["spine1"]))
    r = cluster.slurmkit("fabric", "--ibnetdiscover", str(synth), "--compare-slurm", "--topology-conf")
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == ["finding: not-in-fabric: node n4 is in Slurm but the fabric does not show it",
                                     "finding: not-in-slurm: node gpu9 is on the fabric but not in Slurm"]
    assert "SwitchName=leaf2 Nodes=n2\n" in r.stdout
    dead = dict(cluster.env, SLURM_CONF=str(tmp_path / "no-such-slurm.conf"))
    r = cluster.slurmkit("fabric", "--ibnetdiscover", str(synth), "--compare-slurm", env=dead, timeout=120)
    assert r.returncode == 3 and "could not ask Slurm for its nodes" in r.stderr


@pytest.mark.compat("dev cluster")
def test_gather_nvidia_smi_q_by_srun_makes_one_block_per_nvlink_domain(clean, tmp_path):
    # each node is the healthy-h100x8 scenario (its prolog passes) whose `-q` has a SYNTHETIC Fabric section per
    # GPU (fabric_synth.with_fabric): n1 and n2 in one NVLink domain, n3 and n4 in another
    scenarios = REPO / "dev" / "fakegpu" / "scenarios"
    (tmp_path / "scenarios").mkdir()
    for other in scenarios.iterdir():        # what the healthy scenario's responses reach as ../<scenario>/
        (tmp_path / "scenarios" / other.name).symlink_to(other)
    a, b = "6f0e3a1c-5b2d-4c8e-9a7f-1d2e3f405162", "0a1b2c3d-0000-4000-8000-00000000beef"
    for node, (uuid, clique) in {"n1": (a, 1), "n2": (a, 1), "n3": (b, 2), "n4": (b, 2)}.items():
        scen = tmp_path / "scenarios" / f"nvl-{node}"
        shutil.copytree(scenarios / "healthy-h100x8", scen, symlinks=True)
        q = scen / "nvidia-smi-q.txt"
        q.write_text(with_fabric(q.read_text(), uuid, clique))
        clean.set_scenario(node, str(scen))
    q = tmp_path / "q"
    r = clean.slurmkit("fabric", "--gather", "n[1-4]", "--nvsmi-dir", str(q), "--topology-conf", timeout=180)
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stdout.splitlines() if not ln.startswith("#")] == [
        "BlockName=nvl-6f0e3a1c-1 Nodes=n[1-2]", "BlockName=nvl-0a1b2c3d-2 Nodes=n[3-4]", "BlockSizes=2"]
    assert sorted(p.name for p in q.iterdir()) == ["n1.txt", "n2.txt", "n3.txt", "n4.txt"]
    # a node Slurm does not have: srun fails, nothing came back: could not find out
    r = clean.slurmkit("fabric", "--gather", "n9", "--nvsmi-dir", str(q), timeout=180)
    assert r.returncode == 3 and "no nvidia-smi -q came back from n9 (n9: srun: error:" in r.stderr, r.stderr


@pytest.mark.compat("dev cluster")
def test_leaves_without_a_common_spine_still_run_a_job_across_them(cluster, tmp_path):
    """Measured on 22.05 by hand: with only the two leaves in topology.conf, `sbatch -N3` is refused ("Requested
    node configuration is not available"); the virtual top `slurmkit fabric` adds lets it run on n[1-3]."""
    synth = tmp_path / "ibnetdiscover-synthetic.txt"     # SYNTHETIC: leaf1 and leaf2 cabled to each other
    synth.write_text(synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3"]}, isls=[("leaf1", "leaf2")]))
    gen = subprocess.run([sys.executable, "-m", "slurmkit.cli", "fabric", "--ibnetdiscover", str(synth),
                          "--topology-conf"], capture_output=True, text=True, timeout=60)
    assert gen.returncode == 0 and "SwitchName=fabric-top Switches=leaf[1-2]" in gen.stdout, gen.stderr
    topo = tmp_path / "topology.conf"
    topo.write_text(gen.stdout)
    d = tmp_path / "c"
    dev = [sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(d)]
    up = subprocess.run([*dev, "up", "--slurm", cluster.slurm, "--port", str(PORT), "--nodes", "3", "--gpus", "1",
                         "--hooks", "true", "--topology-conf", str(topo)], capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
        r = subprocess.run(["sbatch", "--parsable", "-N", "3", "-o", "/dev/null", "--wrap", "sleep 1"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        deadline, rec = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "JobState=RUNNING" not in rec and "JobState=COMPLETED" not in rec:
            time.sleep(0.5)
            rec = subprocess.run(["scontrol", "-o", "show", "job", r.stdout.strip().split(";")[0]],
                                 capture_output=True, text=True, timeout=60, env=env).stdout
        assert " NodeList=n[1-3] " in rec, rec
    finally:
        subprocess.run([*dev, "down"], capture_output=True, text=True, timeout=120)
