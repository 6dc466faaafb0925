"""NVLink domains from each node's `nvidia-smi -q` Fabric sections -> Slurm's topology/block (pure).

On GB200/GB300 NVL systems every GPU reports the NVLink domain it joined: `ClusterUUID` (the NVL rack's fabric)
and `CliqueId` (the partition inside it). One block per (ClusterUUID, CliqueId) that holds more than a zero
UUID. A zero ClusterUUID with CliqueId 0 is what a single HGX node (H100/H200/B200 with NVSwitch inside the box)
reports: no multi-node domain, so no block. Findings:

- `fabric-not-ready`: a GPU whose Fabric `State` is not `Completed` or whose `Status` is not `Success` (the
  Azure capture: `Completed` / `Insufficient Resources`): the node stays out of every block.
- `split-domain`: a node whose GPUs report different domains.
- `no-fabric`: a node's capture has no Fabric section (old driver, not `nvidia-smi -q`).
- `no-nvlink-domain`: no node is in a multi-node NVLink domain (topology/block is for NVL systems).
"""

from __future__ import annotations

import re
from ..record import Record, field

from .ibnet import ParseError
from .tree import Finding

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_KV = re.compile(r"(\s*)(State|Status|CliqueId|ClusterUUID)\s*:\s*(.*?)\s*")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class GpuFabric(Record, kw_only=False):
    line: int
    state: str = ""
    status: str = ""
    clique: str = ""
    uuid: str = ""


class Domains(Record, kw_only=False):
    blocks: dict[str, list[str]] = field(default_factory=dict)  # block name -> nodes
    domain_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (ClusterUUID, CliqueId)
    findings: list[Finding] = field(default_factory=list)


def parse_fabric(text: str, path: str) -> list[GpuFabric]:
    """Every Fabric section of an `nvidia-smi -q` text, in order (one per GPU). A section cut before its
    ClusterUUID is a ParseError naming the line (a truncated capture), as is a CliqueId that is not a number."""
    out: list[GpuFabric] = []
    cur: GpuFabric | None = None
    indent = -1
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.strip() == "Fabric":
            cur, indent = GpuFabric(n), len(line) - len(line.lstrip())
            out.append(cur)
            continue
        if cur is None:
            continue
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            cur = None
            continue
        m = _KV.fullmatch(line)
        if m:
            attr = {"State": "state", "Status": "status", "CliqueId": "clique", "ClusterUUID": "uuid"}[m.group(2)]
            setattr(cur, attr, m.group(3))
    for g in out:
        if not g.uuid or not g.state:
            raise ParseError(
                "a Fabric section without its State/ClusterUUID: the capture is cut short", path=path, line=g.line
            )
        if g.clique not in ("", "N/A") and not re.fullmatch(r"\d{1,10}", g.clique):
            raise ParseError(f"CliqueId {g.clique[:40]!r} is not a number", path=path, line=g.line)
    return out


def domains(per_node: dict[str, list[GpuFabric]]) -> Domains:
    """Nodes -> blocks, one per multi-node NVLink domain, named nvl-<first 8 of the ClusterUUID>-<CliqueId>."""
    d = Domains()
    members: dict[tuple[str, str], list[str]] = {}
    for node, gpus in sorted(per_node.items()):
        if not gpus:
            d.findings.append(Finding("no-fabric", f"node {node}: no Fabric section in its nvidia-smi -q"))
            continue
        if all(g.state == "N/A" for g in gpus):  # a PCIe GPU: no NVLink fabric at all
            continue
        bad = [g for g in gpus if g.state != "Completed" or g.status != "Success"]
        if bad:
            g = bad[0]
            d.findings.append(
                Finding(
                    "fabric-not-ready",
                    f"node {node}: {len(bad)} GPU(s) not in their NVLink domain (State {g.state}, Status {g.status})",
                    g.line,
                )
            )
            continue
        doms = sorted({(g.uuid.lower(), g.clique) for g in gpus})
        if len(doms) > 1:
            shown = ", ".join(f"{u}/{c}" for u, c in doms)
            d.findings.append(Finding("split-domain", f"node {node}: its GPUs report different domains: {shown}"))
            continue
        uuid, clique = doms[0]
        if uuid == ZERO_UUID or uuid in ("", "n/a"):
            continue
        d.domain_of[node] = doms[0]
        members.setdefault(doms[0], []).append(node)
    for (uuid, clique), nodes in sorted(members.items(), key=lambda kv: sorted(kv[1])[0]):
        name = _SAFE.sub("-", f"nvl-{uuid[:8]}-{clique}")
        d.blocks[name] = sorted(nodes)
    if per_node and not d.blocks:
        d.findings.append(
            Finding("no-nvlink-domain", "no node is in a multi-node NVLink domain (zero ClusterUUID everywhere)")
        )
    return d


def block_conf(d: Domains, source: str) -> str:
    from .conf import fold

    lines = [f"# topology.conf for TopologyPlugin=topology/block, generated by `slurmkit fabric` from {source}"]
    if d.blocks:
        lines.append(f"# {len(d.blocks)} NVLink domains; BlockSizes= is the smallest domain's node count")
        for name, nodes in d.blocks.items():
            lines.append(f"BlockName={name} Nodes={fold(nodes)}")
        lines.append(f"BlockSizes={min(len(n) for n in d.blocks.values())}")
    return "\n".join(lines) + "\n"


def block_yaml(d: Domains, source: str, name: str = "nvlink") -> str:
    from .conf import fold

    out = [
        f"# topology.yaml (Slurm 25.05+), generated by `slurmkit fabric` from {source}",
        "---",
        f"- topology: {name}",
        "  cluster_default: true",
        "  block:",
        "    block_sizes:",
        f"      - {min((len(n) for n in d.blocks.values()), default=1)}",
        "    blocks:",
    ]
    for bname, nodes in d.blocks.items():
        out += [f"      - block: {bname}", f'        nodes: "{fold(nodes)}"']
    return "\n".join(out) + "\n"


def to_json(d: Domains, per_node: dict[str, list[GpuFabric]]) -> dict:
    return {
        "blocks": [{"name": k, "nodes": v} for k, v in d.blocks.items()],
        "nodes": {
            n: {
                "domain": {"cluster_uuid": d.domain_of[n][0], "clique_id": d.domain_of[n][1]}
                if n in d.domain_of
                else None,
                "gpus": [
                    {"state": g.state, "status": g.status, "clique_id": g.clique, "cluster_uuid": g.uuid} for g in gpus
                ],
            }
            for n, gpus in sorted(per_node.items())
        },
        "findings": [f.to_dict() for f in d.findings],
        "ok": not d.findings,
    }
