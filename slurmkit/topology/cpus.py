"""The CPU layout: sockets, cores, threads and NUMA nodes, from `lscpu -p`, `lscpu`, `numactl -H` or sysfs.

Slurm's gres.conf `Cores=` takes LOGICAL core indices (core 0 = first core of the first socket, numbered socket by
socket, as hwloc's `lstopo` L# shows), not OS CPU ids. On a two-socket Xeon with interleaved numbering (node0 =
CPUs 0,2,4,...) or with SMT (siblings at cpu + cores), copying nvidia-smi's CPU Affinity into Cores= is the classic
"invalid GRES core specification" or a silently wrong binding. `CpuLayout.core_of` does the mapping.

`lscpu -p` and sysfs give the exact mapping. `lscpu` (summary) and `numactl -H` only give node -> CPUs; the mapping
is then derived (nodes are assigned to sockets in order, and within a socket the sorted CPUs fill cores 0..C-1
then wrap to the SMT siblings), and `exact` is False so callers can say so.
"""

from __future__ import annotations

import os
import re
from ..record import Record, field

from ..errors import UsageError
from .model import Topology, format_cpulist, parse_cpulist, small_int


class CpuLayout(Record, kw_only=False):
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cpu_socket: dict[int, int]  # OS cpu id -> socket index (0-based, dense)
    cpu_core: dict[int, int]  # OS cpu id -> Slurm logical core index
    numa_cpus: dict[int, list[int]]  # NUMA node -> OS cpu ids (nodes without CPUs included, empty)
    exact: bool = True
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def core_of(self, cpu: int) -> int:
        return self.cpu_core[cpu]

    def cores_for(self, cpus: list[int]) -> list[int]:
        return sorted({self.cpu_core[c] for c in cpus if c in self.cpu_core})

    def sockets_for(self, cpus: list[int]) -> list[int]:
        return sorted({self.cpu_socket[c] for c in cpus if c in self.cpu_socket})


def _from_triples(rows: list[tuple[int, int, int, int | None]], source: str) -> CpuLayout:
    """rows: (cpu, core id, socket id, node or None) as lscpu -p / sysfs give them (ids need not be dense)."""
    socket_ids = sorted({s for _, _, s, _ in rows})
    sock_index = {s: i for i, s in enumerate(socket_ids)}
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu, core, sock, _ in rows:
        cores.setdefault((sock_index[sock], core), []).append(cpu)
    # logical index: socket by socket, cores in order of their lowest CPU id (hwloc's order)
    order = sorted(cores, key=lambda sc: (sc[0], min(cores[sc])))
    logical = {sc: i for i, sc in enumerate(order)}
    cpu_core = {cpu: logical[(sock_index[sock], core)] for cpu, core, sock, _ in rows}
    cpu_socket = {cpu: sock_index[sock] for cpu, _, sock, _ in rows}
    numa: dict[int, list[int]] = {}
    for cpu, _, _, node in rows:
        if node is not None:
            numa.setdefault(node, []).append(cpu)
    per_socket: dict[int, int] = {}
    for s, _c in cores:
        per_socket[s] = per_socket.get(s, 0) + 1
    threads = max(len(v) for v in cores.values())
    return CpuLayout(
        sockets=len(socket_ids),
        cores_per_socket=max(per_socket.values()),
        threads_per_core=threads,
        cpu_socket=cpu_socket,
        cpu_core=cpu_core,
        numa_cpus={k: sorted(v) for k, v in numa.items()},
        exact=True,
        source=source,
    )


def parse_lscpu_p(text: str, path: str | None = None) -> CpuLayout:
    """`lscpu -p` (default columns CPU,Core,Socket,Node,,L1d,...) or `lscpu -p=CPU,CORE,SOCKET,NODE`."""
    where = path or "<lscpu -p>"
    cols = None
    rows = []
    for i, ln in enumerate(text.splitlines(), 1):
        s = ln.strip()
        if not s:
            continue
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            if body.upper().startswith("CPU,"):
                cols = [c.strip().upper() for c in body.split(",")]
            continue
        if cols is None:
            raise UsageError(
                "no `# CPU,Core,Socket,Node` header line before the data (is this `lscpu -p`?)", path=where, line=i
            )
        for need in ("CPU", "CORE", "SOCKET"):
            if need not in cols:
                raise UsageError(f"`lscpu -p` header has no {need} column", path=where, line=i)
        parts = s.split(",")
        if len(parts) < len(cols):
            raise UsageError(f"expected {len(cols)} comma-separated fields, got {len(parts)}", path=where, line=i)

        def num(name, optional=False):
            v = parts[cols.index(name)].strip() if name in cols else ""
            if v == "" and optional:
                return None
            n = small_int(v)
            if n is None:
                raise UsageError(f"{name} field {v[:40]!r} is not a number", path=where, line=i)
            return n

        rows.append((num("CPU"), num("CORE"), num("SOCKET"), num("NODE", optional=True)))
    if not rows:
        raise UsageError("no CPU rows", path=where)
    if len({r[0] for r in rows}) != len(rows):
        raise UsageError("a CPU id appears twice", path=where)
    return _from_triples(rows, "lscpu -p")


_LSCPU_KV = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
_NODE_LINE = re.compile(r"\ANUMA node([0-9]{1,7}) CPU\(s\)\Z")


def _derive(
    node_cpus: dict[int, list[int]], sockets: int | None, threads: int | None, source: str, where: str
) -> CpuLayout:
    with_cpus = [n for n in sorted(node_cpus) if node_cpus[n]]
    if not with_cpus:
        raise UsageError("no NUMA node lists any CPU", path=where)
    notes = []
    if not sockets:
        sockets = len(with_cpus)
        notes.append(f"socket count unknown: assumed one per NUMA node with CPUs ({sockets})")
    if len(with_cpus) % sockets and len(with_cpus) > sockets:
        raise UsageError(f"{len(with_cpus)} NUMA nodes with CPUs do not divide among {sockets} sockets", path=where)
    per = max(1, len(with_cpus) // sockets)
    threads = threads or 1
    cpu_socket, cpu_core = {}, {}
    if len(with_cpus) < sockets:
        # numa=off or fewer nodes than sockets: split each node's sorted CPUs among the sockets it must hold
        notes.append(
            f"{len(with_cpus)} NUMA node(s) for {sockets} sockets (NUMA disabled?): sockets derived by "
            f"splitting the CPU list"
        )
        allc = sorted(c for n in with_cpus for c in node_cpus[n])
        cores_total = len(allc) // threads
        socket_lists: list[list[int]] = [[] for _ in range(sockets)]
        for c in allc:
            core_global = c % cores_total if cores_total else c
            socket_lists[min(sockets - 1, core_global // max(1, cores_total // sockets))].append(c)
    else:
        socket_lists = [[] for _ in range(sockets)]
        for k, n in enumerate(with_cpus):
            socket_lists[min(sockets - 1, k // per)].extend(node_cpus[n])
    cps = max(len(s) for s in socket_lists) // threads
    for s, cl in enumerate(socket_lists):
        cl = sorted(cl)
        if len(cl) % threads:
            raise UsageError(f"socket {s} has {len(cl)} CPUs, not a multiple of {threads} threads per core", path=where)
        c_here = len(cl) // threads
        for pos, c in enumerate(cl):
            cpu_socket[c] = s
            cpu_core[c] = s * cps + pos % c_here
    return CpuLayout(
        sockets=sockets,
        cores_per_socket=cps,
        threads_per_core=threads,
        cpu_socket=cpu_socket,
        cpu_core=cpu_core,
        numa_cpus={k: sorted(v) for k, v in node_cpus.items()},
        exact=False,
        source=source,
        notes=notes,
    )


def parse_lscpu(text: str, path: str | None = None) -> CpuLayout:
    """Human `lscpu` (old flat or new sectioned format): Socket(s), Thread(s) per core, NUMA nodeN CPU(s)."""
    where = path or "<lscpu>"
    kv, nodes = {}, {}
    for i, ln in enumerate(text.splitlines(), 1):
        m = _LSCPU_KV.match(ln)
        if not m:
            continue
        key, val = m.group(1), m.group(2)
        nm = _NODE_LINE.match(key)
        if nm:
            cl = parse_cpulist(val)
            if cl is None:
                raise UsageError(f"NUMA node{nm.group(1)} CPU list {val!r} is not a cpu list", path=where, line=i)
            nodes[int(nm.group(1))] = cl
        else:
            kv[key] = (val, i)

    def num(key):
        if key not in kv:
            return None
        v, i = kv[key]
        if v in ("-", ""):
            return None
        n = small_int(v)
        if n is None:
            raise UsageError(f"{key}: {v[:40]!r} is not a number", path=where, line=i)
        return n

    if not nodes:
        cpus = kv.get("On-line CPU(s) list")
        if cpus:
            nodes = {0: parse_cpulist(cpus[0]) or []}
        else:
            raise UsageError("no `NUMA nodeN CPU(s)` lines and no on-line CPU list", path=where)
    return _derive(nodes, num("Socket(s)"), num("Thread(s) per core"), "lscpu", where)


_NUMACTL_CPUS = re.compile(r"\Anode ([0-9]{1,7}) cpus:\s*(.*)\Z")


def parse_numactl(
    text: str, path: str | None = None, sockets: int | None = None, threads: int | None = None
) -> CpuLayout:
    """`numactl -H`: node -> CPUs only (sockets and threads per core must come from elsewhere, else 1)."""
    where = path or "<numactl -H>"
    nodes: dict[int, list[int]] = {}
    for i, ln in enumerate(text.splitlines(), 1):
        m = _NUMACTL_CPUS.match(ln.strip())
        if m:
            vals = m.group(2).split()
            maybe = [small_int(v) for v in vals]
            ids = [n for n in maybe if n is not None]
            if len(ids) != len(maybe) or small_int(m.group(1)) is None:
                raise UsageError(f"node {m.group(1)[:40]} cpus: not a list of numbers", path=where, line=i)
            nodes[int(m.group(1))] = sorted(ids)
    if not nodes:
        raise UsageError("no `node N cpus:` lines (is this `numactl -H`?)", path=where)
    return _derive(nodes, sockets, threads, "numactl -H", where)


def parse_cpu_layout(text: str, path: str | None = None) -> CpuLayout:
    """Any of the three text forms, recognised by their content."""
    if re.search(r"^#\s*CPU,", text, re.M) or re.match(r"\s*\d+,\d*,", text):
        return parse_lscpu_p(text, path)
    if re.search(r"^node \d+ cpus:", text, re.M):
        return parse_numactl(text, path)
    if re.search(r"^\s*(NUMA node\d+ CPU\(s\)|Socket\(s\)|On-line CPU\(s\) list)\s*:", text, re.M):
        return parse_lscpu(text, path)
    raise UsageError("not `lscpu -p`, `lscpu` or `numactl -H` output", path=path or "<cpu layout>")


def read_sysfs(root: str = "/") -> CpuLayout:
    """The exact layout from /sys/devices/system/cpu/cpuN/topology and /sys/devices/system/node/nodeN/cpulist."""
    base = os.path.join(root, "sys/devices/system")
    rows = []
    node_of: dict[int, int] = {}
    nd = os.path.join(base, "node")
    if os.path.isdir(nd):
        for name in os.listdir(nd):
            m = re.match(r"^node(\d+)$", name)
            if m:
                with open(os.path.join(nd, name, "cpulist")) as f:
                    for c in parse_cpulist(f.read()) or []:
                        node_of[c] = int(m.group(1))
    cd = os.path.join(base, "cpu")
    for name in os.listdir(cd):
        m = re.match(r"^cpu(\d+)$", name)
        if not m or not os.path.isdir(os.path.join(cd, name, "topology")):
            continue
        cpu = int(m.group(1))
        try:
            with open(os.path.join(cd, name, "topology", "core_id")) as f:
                core = int(f.read())
            with open(os.path.join(cd, name, "topology", "physical_package_id")) as f:
                sock = int(f.read())
        except (OSError, ValueError):
            continue  # offline CPU
        rows.append((cpu, core, max(sock, 0), node_of.get(cpu)))
    if not rows:
        raise UsageError("no CPU topology under sysfs", path=cd)
    return _from_triples(rows, "sysfs")


def pci_numa_node(bus_id: str, root: str = "/") -> int | None:
    """/sys/bus/pci/devices/<bus id>/numa_node (-1 means the platform does not say)."""
    p = os.path.join(root, "sys/bus/pci/devices", bus_id.lower(), "numa_node")
    try:
        with open(p) as f:
            v = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return v if v >= 0 else None


def resolve(topo: Topology, layout: CpuLayout) -> Topology:
    """Fill each GPU's CPU set from its NUMA node where nvidia-smi's CPU Affinity is empty or a restricted
    fragment (cgroup view, interleaved-numbering quirk), and add the warnings only the CPU layout can give."""
    fixed = []
    for g in topo.gpus:
        if not g.numa:
            continue
        node_set = sorted({c for n in g.numa for c in layout.numa_cpus.get(n, [])})
        if not node_set:
            continue
        if not g.cpus or (len(g.cpus) < len(node_set) and len(g.cpus) <= 2):
            fixed.append(g.index)
            g.cpus = node_set
    if fixed:
        topo.warnings.append(
            f"GPU{format_cpulist(fixed)}: CPU set taken from their NUMA node(s) in the CPU "
            f"layout ({layout.source}) because the matrix's CPU Affinity was empty or a fragment"
        )
    span = [g.index for g in topo.gpus if len(layout.sockets_for(g.cpus)) > 1]
    if span:
        topo.warnings.append(
            f"GPU{format_cpulist(span)}: CPU affinity spans sockets "
            f"{format_cpulist(sorted({s for g in topo.gpus if g.index in span for s in layout.sockets_for(g.cpus)}))}: "
            f"Cores= cannot pin them to one socket"
        )
    unknown = sorted({c for g in topo.gpus for c in g.cpus if c not in layout.cpu_core})
    if unknown:
        topo.warnings.append(
            f"CPUs {format_cpulist(unknown)} in the matrix are not in the CPU layout "
            f"({layout.source}): wrong lscpu file for this node?"
        )
    cpu_nodes = [n for n, cl in layout.numa_cpus.items() if cl]
    if layout.sockets > 1 and len(cpu_nodes) <= 1:
        topo.warnings.append(
            f"NUMA disabled: {layout.sockets} sockets but {len(cpu_nodes)} NUMA node with CPUs "
            f"(numa=off on the kernel command line?)"
        )
    if not layout.exact:
        topo.warnings.append(
            f"core numbering derived from `{layout.source}` (nodes to sockets in order, SMT "
            f"siblings at cpu + cores); `lscpu -p` gives it exactly"
        )
    topo.warnings.extend(layout.notes)
    return topo
