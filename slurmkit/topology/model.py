"""The Topology data model: what `nvidia-smi topo -m` (plus, optionally, the CPU layout) says about one node.

Plain data, no I/O. `Topology.to_profile()` is the stable `slurmkit topo --json` document that sites store as a node
profile and that `binding.plan_binding` and `slurmkit submit` consume:

    {"gpus": [{"index": 0, "cpus": [0, 1, ...], "numa": [0], "links": {"GPU1": "NV18", "NIC0": "PXB", ...}}, ...],
     "nics": [{"name": "NIC0", "device": "mlx5_0"}, ...],
     "interconnect": "nvlink" | "partial-nvlink" | "pcie",
     "warnings": ["..."]}
"""

from __future__ import annotations

import re
from ..record import Record, field

# Path kinds from nearest to farthest (nvidia-smi legend). SOC is the pre-2017 name of SYS.
PATH_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
NV_RE = re.compile(r"\ANV([0-9]{1,4})\Z")
INTERCONNECTS = ("nvlink", "partial-nvlink", "pcie")


def link_rank(token: str) -> float:
    """Smaller is closer. NV# beats every PCIe path, and more bonded links beat fewer."""
    m = NV_RE.match(token)
    if m:
        return 1.0 / (1 + int(m.group(1)))  # in (0, 0.5]
    return float(PATH_RANK.get(token, 9))


def is_nvlink(token: str) -> bool:
    return bool(NV_RE.match(token))


def nvlink_count(token: str) -> int:
    m = NV_RE.match(token)
    return int(m.group(1)) if m else 0


class Gpu(Record, kw_only=False):
    index: int
    cpus: list[int] = field(default_factory=list)  # OS CPU ids (empty when unknown)
    numa: list[int] = field(default_factory=list)  # NUMA nodes (empty when unknown)
    links: dict[str, str] = field(default_factory=dict)  # column name -> token, self excluded
    gpu_numa_id: int | None = None  # GH200/GB200: the GPU's own memory NUMA node
    cpu_affinity_text: str = ""  # as printed, for messages
    line: int = 0  # source line, for messages

    def to_dict(self) -> dict:
        return {"index": self.index, "cpus": list(self.cpus), "numa": list(self.numa), "links": dict(self.links)}


class Nic(Record, kw_only=False):
    name: str  # the matrix's column name: NIC0 or mlx5_0
    device: str | None  # mlx5_0 (from the NIC Legend, or the column name itself); None when unknown

    def to_dict(self) -> dict:
        return {"name": self.name, "device": self.device}


class Topology(Record, kw_only=False):
    gpus: list[Gpu]
    nics: list[Nic]
    warnings: list[str] = field(default_factory=list)
    nvlink_shown: bool = True  # False for `topo -mp` (legend without NV#): NVLink exists or not, we cannot see
    source: str | None = None

    @property
    def interconnect(self) -> str:
        pairs = [(a, b) for a in self.gpus for b in self.gpus if a.index < b.index]
        nv = sum(1 for a, b in pairs if is_nvlink(a.links.get(f"GPU{b.index}", "")))
        if pairs and nv == len(pairs):
            return "nvlink"
        return "partial-nvlink" if nv else "pcie"

    def link(self, gpu: int, other: str) -> str:
        return self.gpus[gpu].links.get(other, "")

    def to_profile(self) -> dict:
        return {
            "gpus": [g.to_dict() for g in self.gpus],
            "nics": [n.to_dict() for n in self.nics],
            "interconnect": self.interconnect,
            "warnings": list(self.warnings),
        }


def format_cpulist(ids) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's cpulist format)."""
    ids = sorted(set(ids))
    out = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


_CPULIST_RE = re.compile(r"[0-9]{1,7}(-[0-9]{1,7})?(,[0-9]{1,7}(-[0-9]{1,7})?)*", re.ASCII)
_SMALL_INT_RE = re.compile(r"[0-9]{1,7}", re.ASCII)


def small_int(text: str) -> int | None:
    """A CPU, core, socket or NUMA id: ASCII digits, at most 7 of them (not '²', not 4,300 digits); else None."""
    return int(text) if _SMALL_INT_RE.fullmatch(text) else None


MAX_CPUS = 65536  # ids in one cpu/node list (Linux's NR_CPUS is at most 8192 today)


def parse_cpulist(text: str) -> list[int] | None:
    """'0-3,8' -> [0, 1, 2, 3, 8]; '' -> []; anything else -> None (the caller reports where), and so is a list
    of more than MAX_CPUS ids in all (2,000 parts of '0-65535' in one cell were 131 million ints, gigabytes)."""
    text = text.strip()
    if not text:
        return []
    if not _CPULIST_RE.fullmatch(text):
        return None
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if hi < lo or len(out) + hi - lo >= MAX_CPUS:
            return None
        out.extend(range(lo, hi + 1))
    return sorted(set(out))
