"""submit/render place a multi-node job (issue 33): with the site's submit.placement on, a job that fits under one
leaf switch gets `--switches=1@WAIT` (topology/tree), one that fits an NVLink block `--segment=N` (topology/block);
the spec opts out with `placement: false`; `-v` and the script's own comment say why it was or was not added.
The `scontrol show topology` texts are what slurmctld printed on the dev cluster (tests/unit/fabric/test_placement.py);
tests/integration/test_fabric_cluster.py submits through `slurmkit submit` on a real topology.conf cluster."""
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurmkit import times
from slurmkit.errors import UsageError
from slurmkit.fabric import placement
from slurmkit.jobs import pipeline

from sitesettings import make_settings

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "submit"
TREE = """SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1,3]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n2
SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=n[1-3] Switches=leaf[1-2]
"""
BLOCK = """BlockName=nvl-a BlockIndex=0 Nodes=n[1,3] BlockSize=2
BlockName=nvl-b BlockIndex=1 Nodes=n[2,4] BlockSize=2
"""
SPEC = {"command": ["python", "train.py"], "nodes": 2, "gpus_per_node": 1, "launcher": "srun"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def site(extra: str = ""):
    return make_settings("submit:\n  slurmkit_bin: /opt/slurmkit/bin/slurmkit\n" + extra)


ON = "  placement: true\n"


def asked(text: str):
    calls = []

    def ask():
        calls.append(1)
        return text

    return ask, calls


def build(spec=SPEC, st=None, topo=TREE, **sets):
    ask, calls = asked(topo)
    notes: list[str] = []
    _, r = pipeline.build(dict(spec, **sets), st or site(ON), say=notes.append, topology=ask)
    return r, notes, calls


def sbatch_lines(script: str) -> list[str]:
    return [ln for ln in script.splitlines() if ln.startswith("#SBATCH")]


def test_off_by_default_adds_nothing_asks_nothing_and_the_script_is_the_same():
    st = site()
    assert st.submit.placement is False and st.submit.switch_wait == 300
    r, notes, calls = build(st=st)
    plain = pipeline.build(dict(SPEC), st)[1]
    assert r.script == plain.script and calls == []
    assert "--switches" not in r.script and "# placement" not in r.script
    assert "placement: topology placement is off in the site config (submit.placement)" in notes


def test_a_two_node_job_under_one_leaf_gets_switches_with_the_site_wait():
    r, notes, calls = build()
    assert calls == [1]
    assert "#SBATCH --switches=1@5" in sbatch_lines(r.script)
    why = "2 nodes fit under one leaf switch (the largest has 2): --switches=1@5"
    assert f"placement: {why}" in notes and f"# placement: {why}\n" in r.script
    # the wait is the site's, in Slurm's time format; 0 leaves it to Slurm's max_switch_wait
    assert "#SBATCH --switches=1@1:30" in build(st=site(ON + "  switch_wait: 90\n"))[0].script
    assert "#SBATCH --switches=1\n" in build(st=site(ON + "  switch_wait: 0\n"))[0].script


def test_placement_comes_after_the_keys_and_before_the_specs_own_sbatch_items():
    r = build(sbatch=["--exclusive"], constraint="ib")[0]
    lines = sbatch_lines(r.script)
    assert lines.index("#SBATCH --constraint=ib") < lines.index("#SBATCH --switches=1@5") < lines.index(
        "#SBATCH --exclusive")


def test_a_job_that_fits_no_leaf_gets_nothing_and_says_why():
    r, notes, _ = build(nodes=3)
    assert "--switches" not in r.script
    why = "3 nodes do not fit in one leaf switch (the largest has 2): no placement asked"
    assert f"placement: {why}" in notes and f"# placement: {why}" in r.script


def test_block_topology_gets_a_segment():
    r = build(topo=BLOCK)[0]
    assert "#SBATCH --segment=2" in sbatch_lines(r.script) and "--switches" not in r.script


def test_a_cluster_without_topology_says_so():
    # 22.05 without a topology plugin: nothing on stdout (its "No topology information available" is stderr)
    r, notes, _ = build(topo="")
    assert "--switches" not in r.script
    assert "placement: the cluster has no topology (scontrol show topology lists nothing)" in notes


@pytest.mark.parametrize("sets,why", [
    ({"placement": False}, "the spec opts out of topology placement (placement: false)"),
    ({"nodes": 1}, "a one-node job needs no placement"),
    ({"sbatch": ["--switches=2@10"]}, "the spec asks for --switches=2@10 itself (sbatch:): no placement added"),
    ({"sbatch": ["--segment=1"]}, "the spec asks for --segment=1 itself (sbatch:): no placement added"),
    ({"nodelist": "n[1-2]"}, "the spec names its nodes (nodelist): no placement added"),
])
def test_what_keeps_placement_out_and_asks_slurm_nothing(sets, why):
    r, notes, calls = build(**sets)
    assert calls == [] and f"placement: {why}" in notes
    assert [ln for ln in sbatch_lines(r.script) if "--switches=1" in ln or "--segment=2" in ln] == []


def test_the_spec_key_is_checked_like_any_other():
    from slurmkit.errors import SpecError

    with pytest.raises(SpecError, match="placement"):
        build(placement="sometimes")


def test_unreadable_topology_is_exit_2_with_its_line():
    with pytest.raises(UsageError) as e:
        build(topo=TREE + "garbage\n")
    assert e.value.line == 4 and e.value.exit_code == 2


@pytest.mark.parametrize("bad", ["-1", "86401", "1.5", "five"])
def test_switch_wait_out_of_range_is_refused_with_its_line(bad):
    with pytest.raises(UsageError) as e:
        site(ON + f"  switch_wait: {bad}\n")
    assert e.value.line == 4 and "switch_wait" in str(e.value)


@given(st.integers(min_value=1, max_value=86400))
def test_wait_text_is_slurm_time_for_the_same_seconds(s):
    text = placement.wait_text(s)
    assert placement.MAX_WAIT.fullmatch(text)
    assert times.seconds(text) == s


def test_wait_text_examples():
    assert [placement.wait_text(s) for s in (0, 60, 300, 90, 3599, 3601, 86400)] == [
        "", "1", "5", "1:30", "59:59", "1:00:01", "1440"]
