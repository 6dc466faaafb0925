"""Where a multi-node job should go, given the cluster's topology (pure): the sbatch options that keep it under
one leaf switch (topology/tree: `--switches=1@WAIT`) or inside one NVLink block (topology/block: `--segment`),
and why, or why not. Input: `scontrol show topology` text, which reads the same on 22.05, 24.11 and 26.05
(`SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1,3]`, `BlockName=nvl-a BlockIndex=0 Nodes=n[1,3] BlockSize=1`).

For `submit` and `render` (slurmkit/jobs/placing.py): the site setting submit.placement turns it on, the spec's
`placement: false` opts out, they ask `scontrol show topology` once, and `-v` prints the reason this module gives."""

from __future__ import annotations

import re
from ..record import Record, field

from .. import hostlist
from .ibnet import ParseError

MAX_WAIT = re.compile(r"(\d{1,2}:)?\d{1,2}:\d{2}|\d{1,6}")  # Slurm's max-time: minutes, MM:SS or HH:MM:SS


class Topology(Record, kw_only=False):
    kind: str | None = None  # "tree", "block" or None (flat: nothing listed)
    leaves: dict[str, int] = field(default_factory=dict)  # leaf switch or block -> node count
    base: int | None = None  # topology/block: the base block size (the smallest BlockSize= shown)


def parse_show_topology(text: str, path: str = "scontrol show topology") -> Topology:
    t = Topology()
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        kv = dict(tok.split("=", 1) for tok in s.split() if "=" in tok)
        if "SwitchName" in kv:
            kind, name = "tree", kv["SwitchName"]
            if kv.get("Level", "0") != "0":
                continue
        elif "BlockName" in kv:
            kind, name = "block", kv["BlockName"]
        else:
            raise ParseError(f"not a SwitchName=/BlockName= line: {s[:80]!r}", path=path, line=n)
        if t.kind not in (None, kind):
            raise ParseError("switches and blocks in one topology", path=path, line=n)
        t.kind = kind
        nodes = kv.get("Nodes", "")
        t.leaves[name] = hostlist.count(nodes) if nodes and nodes != "(null)" else 0
        size = kv.get("BlockSize", "")
        if kind == "block" and re.fullmatch(r"\d{1,9}", size):
            t.base = min(int(size), t.base if t.base is not None else int(size))
    return t


def wait_text(seconds: int) -> str:
    """Seconds as Slurm's max-time for `--switches=1@WAIT`: whole minutes as minutes (300 -> "5"), else MM:SS
    under an hour, else HH:MM:SS ("" for 0: no wait given, Slurm's max_switch_wait applies)."""
    if seconds < 0 or seconds >= 100 * 3600:
        raise ValueError(f"switch wait {seconds}s is outside [0, 100 h)")
    if seconds == 0:
        return ""
    if seconds % 60 == 0:
        return str(seconds // 60)
    h, rest = divmod(seconds, 3600)
    return f"{rest // 60}:{rest % 60:02d}" if not h else f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def decide(nodes: int, topo: Topology, *, enabled: bool, wait: str = "") -> tuple[list[str], str]:
    """(sbatch options, reason). `wait`: how long a tree job may wait for one leaf (`--switches=1@WAIT`), in
    Slurm's time format; empty: Slurm's own maximum (SchedulerParameters=max_switch_wait)."""
    if not enabled:
        return [], "topology placement is off in the site config"
    if nodes < 2:
        return [], "a one-node job needs no placement"
    if topo.kind is None or not topo.leaves:
        return [], "the cluster has no topology (scontrol show topology lists nothing)"
    largest = max(topo.leaves.values())
    what = "leaf switch" if topo.kind == "tree" else "NVLink block"
    if nodes > largest:
        return [], f"{nodes} nodes do not fit in one {what} (the largest has {largest}): no placement asked"
    if topo.kind == "tree":
        if wait and not MAX_WAIT.fullmatch(wait):
            raise ValueError(f"bad switch wait {wait!r}: minutes, MM:SS or HH:MM:SS")
        opt = f"--switches=1@{wait}" if wait else "--switches=1"
        return [opt], f"{nodes} nodes fit under one leaf switch (the largest has {largest}): {opt}"
    # measured on 24.11 and 26.05: a segment larger than the base block size is refused ("Requested topology
    # configuration is not available"), and the job's node count must be a multiple of the segment
    base = topo.base or min(topo.leaves.values())
    if nodes <= base:
        return [
            f"--segment={nodes}"
        ], f"{nodes} nodes fit in one NVLink block (base block size {base}): --segment={nodes}"
    if base >= 2 and nodes % base == 0:
        return [f"--segment={base}"], f"{nodes} nodes in segments of one base block ({base} nodes): --segment={base}"
    return [], f"{nodes} nodes are not a multiple of the base block size {base}: topology/block places them itself"
