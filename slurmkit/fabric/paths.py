"""The switch ports between two hosts on an InfiniBand fabric (pure, over tree.build's Fabric): each host's own
cables (HCA port - leaf port, with the rate they trained at), and where the hosts hang from different leaves the
uplinks of those leaves (the route is the subnet manager's: any of them may carry the pair). For the NCCL pairs
sweep: a slow pair whose nodes are fine with other partners points at these ports."""

from __future__ import annotations

from .tree import Fabric, Link


def _cable(fab: Fabric, lk: Link, degraded: set[int]) -> str:
    mark = " (degraded: see the fabric's findings)" if lk.line in degraded else ""
    return f"{fab.label(lk.a)}[{lk.a_port}] - {fab.label(lk.b)}[{lk.b_port}] {lk.rate}{mark}"


def between(fab: Fabric, a: str, b: str) -> dict:
    """{"leaves": {host: leaf or None}, "host_ports": [...], "uplinks": [...], "unknown": [hosts the fabric does
    not show]}: the ports a's and b's traffic crosses, as `switch[port] - peer[port] RATE` texts."""
    degraded = {f.line for f in fab.findings if f.kind == "degraded-link" and f.line is not None}
    by_key = {s.name: k for k, s in fab.switches.items()}
    out: dict = {"leaves": {}, "host_ports": [], "uplinks": [], "unknown": []}
    leaves = []
    for h in (a, b):
        keys = set(fab.hosts.get(h, ()))
        if not keys:
            out["unknown"].append(h)
            out["leaves"][h] = None
            continue
        out["leaves"][h] = fab.leaf_of.get(h)
        leaves.append(fab.leaf_of.get(h))
        for lk in fab.links:
            if lk.a in keys or lk.b in keys:
                out["host_ports"].append(_cable(fab, lk, degraded))
    if len(leaves) == 2 and leaves[0] != leaves[1]:
        for leaf in leaves:
            k = by_key.get(leaf or "")
            for lk in fab.links:
                if k in (lk.a, lk.b) and lk.a in fab.switches and lk.b in fab.switches:
                    out["uplinks"].append(_cable(fab, lk, degraded))
    return out
