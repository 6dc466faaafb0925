"""slurmkit/fabric/placement.py (issue 33, the submit side, not wired into submit yet): the options that keep a
multi-node job under one leaf or in one NVLink block, from `scontrol show topology`. The texts below are what
slurmctld printed on the dev cluster (22.05 tree, 26.05 block) with files `slurmkit fabric` wrote;
tests/integration/test_fabric_cluster.py reads the real output on 22.05, 24.11 and 26.05 and submits with it."""
import pytest

from slurmkit.fabric import placement
from slurmkit.fabric.ibnet import ParseError

TREE = """SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1,3]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n2
SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=n[1-3] Switches=leaf[1-2]
"""
BLOCK = """BlockName=nvl-a BlockIndex=0 Nodes=n[1,3] BlockSize=2
BlockName=nvl-b BlockIndex=1 Nodes=n[2,4] BlockSize=2
"""


def test_reads_leaves_and_blocks():
    t = placement.parse_show_topology(TREE)
    assert t.kind == "tree" and t.leaves == {"leaf1": 2, "leaf2": 1} and t.base is None
    b = placement.parse_show_topology(BLOCK)
    assert b.kind == "block" and b.leaves == {"nvl-a": 2, "nvl-b": 2} and b.base == 2
    assert placement.parse_show_topology("").kind is None


def test_tree_placement_and_its_reasons():
    t = placement.parse_show_topology(TREE)
    assert placement.decide(2, t, enabled=True) == (
        ["--switches=1"], "2 nodes fit under one leaf switch (the largest has 2): --switches=1")
    assert placement.decide(2, t, enabled=True, wait="30:00")[0] == ["--switches=1@30:00"]
    assert placement.decide(3, t, enabled=True) == (
        [], "3 nodes do not fit in one leaf switch (the largest has 2): no placement asked")
    assert placement.decide(1, t, enabled=True) == ([], "a one-node job needs no placement")
    assert placement.decide(2, t, enabled=False) == ([], "topology placement is off in the site config")
    assert placement.decide(2, placement.Topology(), enabled=True)[0] == []
    with pytest.raises(ValueError, match="bad switch wait"):
        placement.decide(2, t, enabled=True, wait="1h; rm -rf /")


def test_block_segments_never_larger_than_the_base_block_and_always_dividing_the_job():
    big = placement.parse_show_topology(BLOCK.replace("BlockSize=2", "BlockSize=4").replace("n[2,4]", "n[2,4-10]"))
    assert big.base == 4
    assert placement.decide(3, big, enabled=True)[0] == ["--segment=3"]
    assert placement.decide(8, big, enabled=True)[0] == ["--segment=4"]
    opts, why = placement.decide(6, big, enabled=True)
    assert opts == [] and "not a multiple of the base block size 4" in why
    # Slurm 24.11 refuses a segment over the base block size (measured): BlockSize=1 means no --segment=2
    one = placement.parse_show_topology(BLOCK.replace("BlockSize=2", "BlockSize=1"))
    assert placement.decide(2, one, enabled=True)[0] == []


def test_unreadable_topology_is_a_parse_error_with_its_line():
    with pytest.raises(ParseError) as e:
        placement.parse_show_topology(TREE + "garbage here\n")
    assert e.value.line == 4
    with pytest.raises(ParseError, match="switches and blocks"):
        placement.parse_show_topology(TREE + BLOCK)
