"""The imperative edge: run `nvidia-smi topo -m` and read the CPU layout on this node (through slurmkit.proc)."""
from __future__ import annotations

from .. import proc
from ..errors import CommandError, SlurmkitError


def capture_topo(settings) -> tuple[str, str]:
    """Run `nvidia-smi topo -m` with the site's tool path and timeout; return (stdout, a label for messages)."""
    argv = [settings.tools.nvidia_smi, "topo", "-m"]
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
