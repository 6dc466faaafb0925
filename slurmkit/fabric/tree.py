"""A parsed capture -> the switch tree (leaves with their nodes, spines above) and its findings (pure).

Nodes are hosts, named from a GUID-to-host map or from the HCA's node description (`n01 HCA-1`, `gpu7 mlx5_0`:
the first word). A leaf is a switch with an HCA on it; a switch's level is its distance in switch hops from the
nearest leaf, and its children are its neighbours one level down. Findings (each makes `slurmkit fabric` exit 1):

- `degraded-link`: a link trained below the common speed (4xDDR among 4xEDR) or narrower than the common width
  of its class: host links and switch-to-switch links are judged apart (NDR200 host ports split from NDR switch
  ports are normal, and so are FDR core links above EDR leaves), a class of fewer than MIN_CLASS links by the
  whole fabric's speed; iblinkinfo's own "Could be ..." hint counts too.
- `one-sided-link`: a link only one of its ends reports (not judged when the capture is elided: `...omitted`).
- `split-node`: a host whose HCAs hang from different leaves (on a rail-optimised fabric this is by design:
  pick one rail with `hca=`).
- `unnamed-hca`: an HCA with no host name (default description such as `MT4115 ConnectX4`): map its GUID.
- `not-in-fabric` / `not-in-slurm`: a node Slurm has that the fabric does not show, and the reverse.
- `elided`: the capture says it is not whole.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from ..record import Record, field

from .ibnet import SPEEDS, Capture, Node, Sighting

HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_DEFAULT_DESC = re.compile(r"MT\d+|Mellanox|ConnectX\S*", re.IGNORECASE)
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MIN_CLASS = 4  # links a class (host links, switch links) needs to have a common speed of its own


class Link(Record, kw_only=False):
    a: str
    a_port: int
    b: str
    b_port: int
    width: int | None
    speed: str | None
    seen_from: int  # 1 or 2 ends
    line: int
    host_link: bool = False
    hint: str = ""

    @property
    def rate(self) -> str:
        return f"{self.width or '?'}x{self.speed or '???'}"


class Switch(Record, kw_only=False):
    key: str
    name: str
    desc: str
    guid: str | None
    lid: int | None
    level: int | None = None
    nodes: list[str] = field(default_factory=list)  # hosts whose (first) HCA hangs from this leaf
    children: list[str] = field(default_factory=list)  # switch names one level down
    virtual: bool = False  # not on the fabric: a top that joins leaves no one switch reaches (see _tops)


class Finding(Record, kw_only=False):
    kind: str
    message: str
    line: int | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "line": self.line}


class Fabric(Record, kw_only=False):
    path: str
    fmt: str
    switches: dict[str, Switch]  # key -> switch
    hcas: dict[str, str | None]  # HCA node key -> host name (None: unnamed)
    hosts: dict[str, list[str]]  # host -> its HCA keys
    leaf_of: dict[str, str]  # host -> leaf switch name
    links: list[Link]
    findings: list[Finding]
    nodes: dict[str, Node]
    elided: list[int]
    slurm_nodes: set[str] | None = None

    def by_level(self) -> dict[int, list[Switch]]:
        out: dict[int, list[Switch]] = {}
        for s in self.switches.values():
            if s.level is not None:
                out.setdefault(s.level, []).append(s)
        return dict(sorted(out.items()))

    def label(self, key: str) -> str:
        """How a finding names a node: a switch by its name, an HCA by host and description."""
        if key in self.switches:
            return self.switches[key].name
        n = self.nodes.get(key)
        return (n.desc or key) if n else key


def host_name(node: Node, guid_map: dict[str, str]) -> str | None:
    """The host an HCA belongs to: the GUID map first, else the first word of its node description."""
    if node.guid and node.guid in guid_map:
        return guid_map[node.guid]
    words = node.desc.split()
    if not words or _DEFAULT_DESC.fullmatch(words[0]):
        return None
    return words[0] if HOST.fullmatch(words[0]) else None


def switch_name(node: Node) -> str:
    """A SwitchName for topology.conf: the name in an `MF0;<name>:<model>` description, a one-word description
    (a node-name map's), else the GUID (or LID)."""
    d = node.desc.strip()
    m = re.match(r"MF0;([^:;]{1,64}):", d)
    if m:
        cand = m.group(1)
    elif HOST.fullmatch(d):
        cand = d
    elif node.guid and re.fullmatch(r"[0-9a-f]{16}", node.guid):
        cand = f"ibsw-{node.guid}"
    else:
        cand = f"ibsw-lid{node.lid}" if node.lid is not None else "ibsw"
    return _SAFE.sub("-", cand)[:64] or "ibsw"


def _links(cap: Capture) -> list[Link]:
    ends: dict[tuple[str, int], Sighting] = {}
    for s in cap.sightings:
        if s.peer is not None and s.peer_port is not None:
            ends.setdefault((s.node, s.port), s)
    out, done = [], set()
    for (node, port), s in ends.items():
        if (node, port) in done:
            continue
        assert s.peer is not None and s.peer_port is not None
        other = ends.get((s.peer, s.peer_port))
        two = other is not None and other.peer == node and other.peer_port == port
        done.add((node, port))
        width, speed, hint = s.width, s.speed, s.hint
        if two and other is not None:
            done.add((s.peer, s.peer_port))
            hint = hint or other.hint
            # the two ends should agree; where they do not, the slower view is the link
            if other.width is not None and (width is None or other.width < width):
                width = other.width
            if other.speed is not None and (speed is None or SPEEDS[other.speed] < SPEEDS[speed]):
                speed = other.speed
        kinds = {cap.nodes[node].kind, cap.nodes[s.peer].kind}
        out.append(
            Link(node, port, s.peer, s.peer_port, width, speed, 2 if two else 1, s.line, kinds != {"switch"}, hint)
        )
    return out


def _common(values: list) -> object | None:
    """The most frequent value; among equally frequent ones the highest (so the lower ones are the findings)."""
    if not values:
        return None
    c = Counter(values)
    top = max(c.values())
    return max(v for v, k in c.items() if k == top)


def _degraded(fab: Fabric) -> None:
    known = [lk for lk in fab.links if lk.speed is not None and lk.width is not None]
    overall = _common([SPEEDS[lk.speed] for lk in known if lk.speed])
    speed, width = {}, {}
    for cls in (True, False):
        links = [lk for lk in known if lk.host_link == cls]
        # a class of a few links has no norm of its own (one DDR ISL between two leaves): the fabric's is used
        speed[cls] = _common([SPEEDS[lk.speed] for lk in links if lk.speed]) if len(links) >= MIN_CLASS else overall
        width[cls] = _common([lk.width for lk in links])
    by_gbps = {v: k for k, v in SPEEDS.items()}
    for lk in known:
        assert lk.speed is not None and lk.width is not None
        why = []
        sp = speed[lk.host_link]
        if sp is not None and SPEEDS[lk.speed] < sp:  # type: ignore[operator]
            why.append(f"speed {lk.speed} below the fabric's common {by_gbps[sp]}")  # type: ignore[index]
        w = width[lk.host_link]
        if w is not None and lk.width < w:  # type: ignore[operator]
            why.append(f"width {lk.width}x below the common {w}x of {'host' if lk.host_link else 'switch'} links")
        if lk.hint and not why:
            why.append(f"iblinkinfo says: {lk.hint}")
        if why:
            fab.findings.append(
                Finding(
                    "degraded-link",
                    f"link {fab.label(lk.a)}[{lk.a_port}] - {fab.label(lk.b)}[{lk.b_port}] trained at {lk.rate}: "
                    + "; ".join(why),
                    lk.line,
                )
            )


def _levels(fab: Fabric, adj: dict[str, set[str]]) -> None:
    queue = deque(k for k, s in fab.switches.items() if s.level == 0)
    while queue:
        k = queue.popleft()
        lvl = fab.switches[k].level
        assert lvl is not None
        for nb in sorted(adj.get(k, ())):
            if fab.switches[nb].level is None:
                fab.switches[nb].level = lvl + 1
                queue.append(nb)
    for k, s in fab.switches.items():
        if s.level:
            s.children = sorted(fab.switches[c].name for c in adj.get(k, ()) if fab.switches[c].level == s.level - 1)


def _tops(fab: Fabric, adj: dict[str, set[str]]) -> None:
    """A connected fabric whose leaves no one switch reaches (leaves cabled to each other, no common spine): Slurm's
    topology/tree never lets a job span switches without a common ancestor, though the cables are there. A virtual
    top switch over the highest switches of such a fabric joins them (slurmibtopology.sh leaves the same line
    commented out, for the admin to add). Separate fabrics (no path between them) stay apart."""
    reach: dict[str, set[str]] = {}

    def leaves_under(s: Switch) -> set[str]:
        if s.name not in reach:
            reach[s.name] = {s.name} if s.level == 0 else set()
            for c in s.children:
                reach[s.name] |= leaves_under(by_name[c])
        return reach[s.name]

    by_name = {s.name: s for s in fab.switches.values()}
    seen: set[str] = set()
    for start in sorted(fab.switches):
        if start in seen:
            continue
        comp, stack = set(), [start]
        while stack:
            k = stack.pop()
            if k not in comp:
                comp.add(k)
                stack.extend(adj.get(k, ()))
        seen |= comp
        sws = [fab.switches[k] for k in sorted(comp) if fab.switches[k].level is not None]
        leaves = {s.name for s in sws if s.level == 0}
        if len(leaves) < 2 or any(leaves_under(s) >= leaves for s in sws):
            continue
        parented = {c for s in sws for c in s.children}
        name, i = "fabric-top", 2
        while name in by_name:
            name, i = f"fabric-top-{i}", i + 1
        top = Switch(f"virtual:{name}", name, "virtual: joins switches without a common spine", None, None)
        top.level = max(s.level or 0 for s in sws) + 1
        top.children = sorted(s.name for s in sws if s.name not in parented)
        top.virtual = True
        fab.switches[top.key] = by_name[name] = top


def build(
    cap: Capture, *, guid_map: dict[str, str] | None = None, hca: str | None = None, slurm_nodes: set[str] | None = None
) -> Fabric:
    """The tree and its findings. `guid_map`: HCA GUID (16 hex digits) -> host; `hca`: keep only HCAs whose
    description's second word is this (one rail of a rail-optimised fabric); `slurm_nodes`: Slurm's node names,
    to compare with (None: not compared)."""
    gm = guid_map or {}
    switches, names = {}, set()
    for k, n in sorted(cap.nodes.items()):
        if n.kind != "switch":
            continue
        name = switch_name(n)
        if name in names:
            name = f"{name}-{(n.guid or str(n.lid))[-6:]}"
        i = 2
        base = name
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names.add(name)
        switches[k] = Switch(k, name, n.desc, n.guid, n.lid)
    links = _links(cap)
    fab = Fabric(cap.path, cap.fmt, switches, {}, {}, {}, links, [], cap.nodes, cap.elided, slurm_nodes)
    if cap.elided:
        fab.findings.append(
            Finding(
                "elided",
                f"the capture is not whole (elided at line {cap.elided[0]}): one-sided links are not judged",
                cap.elided[0],
            )
        )
    adj: dict[str, set[str]] = {}
    attached: dict[str, list[tuple[str, int]]] = {}  # HCA key -> (switch key, switch port)
    for lk in links:
        ka, kb = cap.nodes[lk.a].kind, cap.nodes[lk.b].kind
        if ka == kb == "switch":
            adj.setdefault(lk.a, set()).add(lk.b)
            adj.setdefault(lk.b, set()).add(lk.a)
        elif ka == "switch" or kb == "switch":
            sw, h, port = (lk.a, lk.b, lk.a_port) if ka == "switch" else (lk.b, lk.a, lk.b_port)
            attached.setdefault(h, []).append((sw, port))
        if lk.seen_from == 1 and not cap.elided:
            fab.findings.append(
                Finding(
                    "one-sided-link",
                    f"link {fab.label(lk.a)}[{lk.a_port}] - {fab.label(lk.b)}[{lk.b_port}] is reported by one end only",
                    lk.line,
                )
            )
    for k, n in sorted(cap.nodes.items(), key=lambda kv: kv[1].desc):
        if n.kind != "ca" or k not in attached:
            continue
        words = n.desc.split()
        if hca is not None and (len(words) < 2 or words[1] != hca):
            continue
        host = host_name(n, gm)
        fab.hcas[k] = host
        if host is None:
            fab.findings.append(
                Finding("unnamed-hca", f"HCA {n.desc or k!r} (GUID {n.guid}) has no host name: give a GUID map", n.line)
            )
            continue
        fab.hosts.setdefault(host, []).append(k)
    for host, keys in sorted(fab.hosts.items()):
        leaves = sorted({switches[sw].name for k in keys for sw, _p in attached[k]})
        first = switches[attached[keys[0]][0][0]]
        fab.leaf_of[host] = first.name
        if len(leaves) > 1:
            fab.findings.append(
                Finding("split-node", f"node {host}'s HCAs hang from different leaves: {', '.join(leaves)}")
            )
    in_slurm = set(fab.hosts) if slurm_nodes is None else set(fab.hosts) & slurm_nodes
    under: dict[str, list[str]] = {}
    for h, leaf in fab.leaf_of.items():
        if h in in_slurm:
            under.setdefault(leaf, []).append(h)
    leaf_keys = {sw for k in fab.hcas for sw, _p in attached.get(k, ())}
    for key, s in switches.items():
        s.nodes = sorted(under.get(s.name, ()))
        if key in leaf_keys:
            s.level = 0
    _levels(fab, adj)
    _tops(fab, adj)
    _degraded(fab)
    if slurm_nodes is not None:
        for h in sorted(slurm_nodes - set(fab.hosts)):
            fab.findings.append(Finding("not-in-fabric", f"node {h} is in Slurm but the fabric does not show it"))
        for h in sorted(set(fab.hosts) - slurm_nodes):
            fab.findings.append(Finding("not-in-slurm", f"node {h} is on the fabric but not in Slurm"))
    return fab
