"""The imperative edge: run `nvidia-smi topo -m` and read the CPU layout on this node (through slurmkit.proc)."""

from __future__ import annotations

from .. import proc
from ..errors import CommandError, SlurmkitError


def capture_topo(settings) -> tuple[str, str]:
    """Run `nvidia-smi topo -m` with the site's tool path and timeout; return (stdout, a label for messages)."""
    argv = proc.tool(settings.tools.nvidia_smi, "topo", "-m")
    try:
        res = proc.run(argv, timeout=settings.topology.timeout)
    except CommandError as e:
        raise SlurmkitError(f"cannot read the GPU topology: {e}") from None
    return res.stdout, f"`{' '.join(argv)}` output"


def capture_cpu_layout(settings, say=lambda m: None):
    """The CPU layout from sysfs (exact); `lscpu -p` when sysfs has no topology (some containers)."""
    from ..errors import UsageError
    from .cpus import parse_lscpu_p, read_sysfs

    try:
        return read_sysfs(settings.topology.sysfs_root)
    except (OSError, UsageError) as e:
        say(f"sysfs CPU topology unavailable ({e}); trying lscpu -p")
    try:
        res = proc.run([settings.topology.lscpu, "-p=CPU,CORE,SOCKET,NODE"], timeout=settings.topology.timeout)
    except CommandError as e:
        say(f"no CPU layout: {e}")
        return None
    return parse_lscpu_p(res.stdout, path="`lscpu -p` output")


def sysfs_bus_id(nvsmi_bus_id: str) -> str:
    """nvidia-smi's 00000000:3B:00.0 -> sysfs's 0000:3b:00.0."""
    dom, _, rest = nvsmi_bus_id.strip().partition(":")
    return f"{dom[-4:]}:{rest}".lower()


def fill_numa_from_pci(topo, settings, say=lambda m: None) -> None:
    """Where the matrix gives a GPU no NUMA node (old driver, N/A), ask sysfs: /sys/bus/pci/devices/<id>/numa_node."""
    from .cpus import pci_numa_node

    if all(g.numa for g in topo.gpus):
        return
    argv = proc.tool(settings.tools.nvidia_smi, "--query-gpu=index,pci.bus_id", "--format=csv,noheader")
    try:
        res = proc.run(argv, timeout=settings.topology.timeout)
    except CommandError as e:
        say(f"no PCI bus ids for the NUMA fallback: {e}")
        return
    filled = []
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) >= len(topo.gpus):
            continue
        g = topo.gpus[int(parts[0])]
        if g.numa:
            continue
        node = pci_numa_node(sysfs_bus_id(parts[1]), settings.topology.sysfs_root)
        if node is not None:
            g.numa = [node]
            filled.append(g.index)
    if filled:
        from .model import format_cpulist

        still = [g.index for g in topo.gpus if not g.numa]
        topo.warnings[:] = [w for w in topo.warnings if "no NUMA Affinity in the matrix" not in w]
        if still:
            topo.warnings.append(f"GPU{format_cpulist(still)}: no NUMA Affinity in the matrix nor in sysfs")
        topo.warnings.append(
            f"GPU{','.join(map(str, filled))}: NUMA node read from "
            f"/sys/bus/pci/devices/*/numa_node (the matrix had none)"
        )
