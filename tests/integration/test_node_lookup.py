"""One node's record from the real controller: what the drain path and the health program ask on every job and
every interval. They ask `scontrol -o -d show node NAME` (only that node, on every Slurm version) and must get
the same record the whole cluster's listing gives, a drained node's reason with its spaces and `=` included; so
must the submit's cluster check, which lists every node with `scontrol -o -d show node`."""
from __future__ import annotations

import pytest

from slurmkit import config, drain
from slurmkit.slurm.cli_backend import CliBackend

REASON = "slurmkit:xid79 GPU 0000:5d:00 fell off the bus: Key=Val (job 12)"


def site(cluster):
    return config.load(str(cluster.site_config))


@pytest.mark.compat("nodes")
def test_one_nodes_record_is_the_listings_record_and_asks_only_that_node(clean):
    cluster = clean
    cluster.run("scontrol", "update", "NodeName=n3", "State=DRAIN", f"Reason={REASON}")
    said = []
    one = CliBackend(timeout=15, say=said.append).nodes("n3")
    assert said == ["nodes from `scontrol -o -d show node n3`"]     # -v says what was asked: only n3
    full = {r.name: r for r in CliBackend(timeout=15).nodes()}
    assert [r.to_dict() for r in one] == [full["n3"].to_dict()]
    assert one[0].drained and one[0].reason == REASON
    two = CliBackend(timeout=15).nodes("n[1-2]")
    assert [r.to_dict() for r in two] == [full["n1"].to_dict(), full["n2"].to_dict()]
    # the submit's cluster check lists every node with the same command, one call on every version
    said.clear()
    check = CliBackend(timeout=15, say=said.append).nodes_for_check()
    assert said == ["nodes from `scontrol -o -d show node`"]
    assert {r.name: r.to_dict() for r in check} == {n: r.to_dict() for n, r in full.items()}


def test_a_name_that_is_no_node_is_an_unknown_node_not_a_failed_drain(clean):
    cluster = clean
    s = site(cluster)
    assert CliBackend(timeout=15).nodes("nosuchnode") == []
    assert drain.drain_node(s, "nosuchnode", drain.reason_for(s, "ecc", "test")) == "skipped-unknown-node"
    # a real node still drains through the one-node lookup, and the etiquette holds
    assert drain.drain_node(s, "n2", REASON) == "drained"
    assert drain.drain_node(s, "n2", REASON) == "already-drained"
    assert cluster.node("n2").reason == REASON
