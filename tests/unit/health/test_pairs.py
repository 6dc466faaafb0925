"""The NCCL pairs sweep's pure part (issue 33): pairing, each pair's result from its all_reduce_perf output (the
nccl-tests parser over real 2-node captures in tests/fixtures/nccl/), judging, naming the node whose every pair is
slow, and the switch ports of a slow pair on a fabric. Slow outputs are SYNTHETIC: a real capture with its
"Avg bus bandwidth" footer lowered (the rows are not what the parser reads when a footer is there)."""
import re
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurmkit.fabric import ibnet, paths, tree
from slurmkit.health import pairs

from fabric_synth import synth_ibnetdiscover

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
GOOD = (FIX / "gcp-a3mega-h100-2node-16gpu-all_reduce_perf-healthy.txt").read_text()  # Avg 70.742
FAILED = (FIX / "rtx5090-2gpu-all_reduce_perf-debug-info-nccl-warn-cuda-failure-nccl-tests-287.txt").read_text()


def synthetic_slow(gbps: float) -> str:
    """SYNTHETIC: the healthy capture with its footer's average bus bandwidth replaced."""
    out, n = re.subn(r"(# Avg bus bandwidth\s*:\s*)70\.742", lambda m: f"{m.group(1)}{gbps:.3f}", GOOD)
    assert n == 1
    return out


def test_ring_pairs_every_node_with_two_partners_and_all_is_every_pair():
    assert pairs.plan(["n1", "n2", "n3", "n4"]) == [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n1")]
    assert pairs.plan(["n1", "n2"]) == [("n1", "n2")]
    assert pairs.plan(["n1", "n2", "n3"], "all") == [("n1", "n2"), ("n1", "n3"), ("n2", "n3")]
    with pytest.raises(ValueError, match="at least 2 nodes"):
        pairs.plan(["n1", "n1"])
    with pytest.raises(ValueError, match="pairing 'quick'"):
        pairs.plan(["n1", "n2"], "quick")


@given(st.lists(st.sampled_from([f"n{i}" for i in range(12)]), min_size=2, unique=True))
def test_a_ring_covers_each_node_twice_with_two_partners(nodes):
    plan = pairs.plan(nodes)
    assert len(set(map(frozenset, plan))) == len(plan) and all(a != b for a, b in plan)
    for n in nodes:
        partners = {b if a == n else a for a, b in plan if n in (a, b)}
        assert len(partners) == (1 if len(nodes) == 2 else 2)


def test_a_result_is_a_figure_only_when_the_output_is_clean():
    assert pairs.result("n1", "n2", GOOD).busbw == 70.742
    failed = pairs.result("n1", "n2", FAILED, "n1-n2.out")
    assert failed.busbw is None and failed.error.startswith("all_reduce_perf failed: ") and "n1-n2.out" in failed.error
    missing = pairs.result("n1", "n2", None)
    assert missing.missing and missing.error == "no output"
    empty = pairs.result("n1", "n2", "srun: error: n2: task 1: Exited with exit code 1\n")
    assert empty.busbw is None and empty.error == "no bus bandwidth in 1 line(s) of output"
    wrong = GOOD.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")  # SYNTHETIC
    assert "3 out of bounds" in pairs.result("n1", "n2", wrong).error


def ring(outputs: dict[tuple[str, str], str | None]):
    return [pairs.result(a, b, t) for (a, b), t in outputs.items()]


def test_a_node_whose_pairs_are_all_slow_is_named_not_its_links():
    # n3's two pairs at 30 GB/s, the others at 70.742: n3 is named; the slow pairs are explained by it
    slow = synthetic_slow(30.0)
    v = pairs.judge(ring({("n1", "n2"): GOOD, ("n2", "n3"): slow, ("n3", "n4"): slow, ("n4", "n1"): GOOD}),
                    expected=None, min_ratio=0.8)
    assert v.reference == 70.742 and v.reference_source == "the best of 4 pairs" and v.threshold == 56.594
    assert [b["node"] for b in v.bad_nodes] == ["n3"] and v.bad_pairs == [] and not v.ok
    assert v.bad_nodes[0]["why"] == ("all 2 of its pairs are slow or failed: n2-n3 30 GB/s < 0.8 x 70.742 GB/s (the "
                                     "best of 4 pairs); n3-n4 30 GB/s < 0.8 x 70.742 GB/s (the best of 4 pairs)")
    assert [p["status"] for p in v.pairs] == ["ok", "slow", "slow", "ok"]


def test_one_node_bad_in_a_ring_of_three_is_still_found():
    # the median would be the slow figure here (2 of 3 pairs): the best pair is the reference
    slow = synthetic_slow(20.0)
    v = pairs.judge(ring({("n1", "n2"): GOOD, ("n2", "n3"): slow, ("n3", "n1"): FAILED}), expected=None, min_ratio=0.8)
    assert [b["node"] for b in v.bad_nodes] == ["n3"] and v.bad_pairs == []


def test_a_slow_pair_whose_nodes_are_fine_elsewhere_is_the_path_between_them():
    v = pairs.judge(ring({("n1", "n2"): GOOD, ("n2", "n3"): synthetic_slow(40.0), ("n3", "n4"): GOOD,
                          ("n4", "n1"): GOOD}), expected=None, min_ratio=0.8)
    assert v.bad_nodes == [] and [(p["a"], p["b"], p["status"]) for p in v.bad_pairs] == [("n2", "n3", "slow")]


def test_healthy_pairs_are_ok_and_a_site_figure_judges_them_all():
    v = pairs.judge(ring({("n1", "n2"): GOOD, ("n2", "n3"): GOOD, ("n3", "n1"): GOOD}), expected=None, min_ratio=0.8)
    assert v.ok and [p["status"] for p in v.pairs] == ["ok"] * 3
    # every pair at 70.742 on a fabric that should do 100: all slow, every node named
    v = pairs.judge(ring({("n1", "n2"): GOOD, ("n2", "n3"): GOOD, ("n3", "n1"): GOOD}), expected=100.0, min_ratio=0.8)
    assert sorted(b["node"] for b in v.bad_nodes) == ["n1", "n2", "n3"]


def test_two_nodes_cannot_be_told_apart_and_one_figure_is_no_reference():
    v = pairs.judge(ring({("n1", "n2"): synthetic_slow(10.0)}), expected=50.0, min_ratio=0.8)
    assert v.bad_nodes == [] and len(v.bad_pairs) == 1
    assert v.bad_pairs[0]["why"].endswith("n1 and n2 in no other pair: cannot tell which node (sweep with a third node)")
    v = pairs.judge(ring({("n1", "n2"): GOOD}), expected=None, min_ratio=0.8)
    assert not v.ok and v.unknown and "set nccl.pairs_expected_busbw_gbps" in v.unknown[0]
    assert v.pairs[0]["status"] == "unjudged"


def test_a_missing_output_is_unknown_never_ok():
    v = pairs.judge(ring({("n1", "n2"): GOOD, ("n2", "n3"): GOOD, ("n3", "n1"): None}), expected=None, min_ratio=0.8)
    assert not v.ok and v.unknown == ["pair n3-n1: no output"] and v.bad_nodes == []


def test_a_slow_pair_maps_to_its_switch_ports():
    # SYNTHETIC fabric: n1, n2 under leaf1, n3 under leaf2 at 4xDDR, one spine
    text = synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3", "n4"]}, ["spine1"],
                               rates={("n3", "leaf2"): "4xDDR"})
    fab = tree.build(ibnet.parse(text, "ib.txt"))
    p = paths.between(fab, "n2", "n3")
    assert p["leaves"] == {"n2": "leaf1", "n3": "leaf2"} and p["unknown"] == []
    assert any(s.startswith("leaf1[2] - n2 mlx5_0[1] 4xEDR") for s in p["host_ports"]), p
    assert any(s.startswith("leaf2[1] - n3 mlx5_0[1] 4xDDR (degraded") for s in p["host_ports"]), p
    assert sorted(p["uplinks"]) == sorted(u for u in p["uplinks"] if "spine1" in u) and len(p["uplinks"]) == 2
    same = paths.between(fab, "n1", "n2")
    assert same["uplinks"] == [] and len(same["host_ports"]) == 2
    assert paths.between(fab, "n1", "gpu9")["unknown"] == ["gpu9"]


def test_a_pair_job_takes_both_nodes_whole_and_runs_one_task_per_node():
    from slurmkit.health import sweep

    text = sweep.pair_script("n1", "n2", 8, tool=["/opt/nccl tests/all_reduce_perf"], args=["-g", "8"],
                             time_limit="00:30:00", partition="gpu", qos=None, nice=10000,
                             output=sweep.pair_output("/shared/pairs/", "n1", "n2"))
    lines = text.splitlines()
    assert "#SBATCH --nodelist=n1,n2" in lines and "#SBATCH --exclusive" in lines and "#SBATCH --gres=gpu:8" in lines
    assert "#SBATCH --output=/shared/pairs/n1+n2.out" in lines and "#SBATCH --open-mode=truncate" in lines
    assert lines[-1] == ("exec srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 "
                         "'/opt/nccl tests/all_reduce_perf' -g 8")


def test_the_report_reads_the_plan_and_each_pairs_output(tmp_path):
    from slurmkit.errors import UsageError
    from slurmkit.health import pairsreport

    with pytest.raises(UsageError, match="no pairs sweep here"):
        pairsreport.gather(str(tmp_path))
    plan = pairs.plan(["n1", "n2", "n3"])
    pairsreport.write_plan(str(tmp_path), plan, "ring", {f"{a}+{b}": None for a, b in plan})
    (tmp_path / "n1+n2.out").write_text(GOOD)
    (tmp_path / "n2+n3.out").write_text(GOOD)
    results, _ = pairsreport.gather(str(tmp_path))
    doc = pairsreport.document(pairs.judge(results, expected=None, min_ratio=0.8))
    assert pairsreport.exit_code(doc) == 3 and doc["unknown"][0].startswith("pair n3-n1: no output (")
    (tmp_path / "n3+n1.out").write_text(synthetic_slow(10.0))
    doc = pairsreport.document(pairs.judge(pairsreport.gather(str(tmp_path))[0], expected=None, min_ratio=0.8))
    assert pairsreport.exit_code(doc) == 1 and doc["bad_pairs"][0]["a"] == "n3"
    assert "pair n3-n1 slow, its nodes fine with other partners: 10 GB/s < 0.8 x 70.742 GB/s (the best of 3 pairs)" \
        in pairsreport.text_lines(doc)
    (tmp_path / "plan.json").write_text('{"pairs": [["n1"]]}')
    with pytest.raises(UsageError, match="not a pairs sweep plan"):
        pairsreport.gather(str(tmp_path))


@pytest.mark.parametrize("argv,msg", [
    (["--checks", "nccl-pairs"], "--checks nccl-pairs goes with --sweep"),
    (["--checks", "nccl,nccl-pairs", "--sweep", "gpu"], "or nccl-pairs alone"),
    (["--ibnetdiscover", "x.txt"], "--ibnetdiscover goes with --pairs-report"),
    (["--pairs-report", "--sweep", "gpu"], "choose one"),
])
def test_usage_errors_exit_2(argv, msg, tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "health", *argv], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "SLURMKIT_CONFIG": str(tmp_path / "none.yaml")})
    assert r.returncode == 2 and msg in r.stderr, r.stderr
