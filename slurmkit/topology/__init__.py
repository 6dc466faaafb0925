"""Topology: `nvidia-smi topo -m` + the CPU layout -> Topology; gres.conf lines; CPU/GPU/NIC binding.

    from slurmkit.topology import parse_topo, profile_from_text, plan_binding
    profile = profile_from_text(open("topo.txt").read(), path="topo.txt")   # the `slurmkit topo --json` document
    plan = plan_binding(profile, gpus_per_task=2)

Everything here is pure (text and data in, data out) except `live`, which runs the commands.
"""

from __future__ import annotations

# the names below load on first use (PEP 562): `slurmkit submit` imports .binding, and must not pay for the
# nvidia-smi parser it does not use
_LAZY = {
    "plan_binding": "binding",
    "validate_profile": "binding",
    "Gpu": "model",
    "Nic": "model",
    "Topology": "model",
    "format_cpulist": "model",
    "parse_cpulist": "model",
    "parse_topo": "nvsmi",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'slurmkit.topology' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Gpu",
    "Nic",
    "Topology",
    "format_cpulist",
    "parse_cpulist",
    "parse_topo",
    "plan_binding",
    "profile_from_text",
    "load_profile",
    "validate_profile",
]


def profile_from_text(
    topo_text: str, path: str | None = None, lscpu_text: str | None = None, lscpu_path: str | None = None
) -> dict:
    """A node profile (the `slurmkit topo --json` document) from `nvidia-smi topo -m` text and, optionally, CPU
    layout text (`lscpu -p`, `lscpu`, or `numactl -H`)."""
    from .nvsmi import parse_topo

    topo = parse_topo(topo_text, path=path)
    if lscpu_text is not None:
        from .cpus import parse_cpu_layout, resolve

        resolve(topo, parse_cpu_layout(lscpu_text, path=lscpu_path))
    return topo.to_profile()


def load_profile(path: str) -> dict:
    """Read a stored profile: a `slurmkit topo --json` file, or raw `nvidia-smi topo -m` text."""
    import json
    from ..bounded import read_text
    from ..errors import UsageError

    text = read_text(path, what="topology profile")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
        from .binding import validate_profile

        return validate_profile(doc, path=path)
    return profile_from_text(text, path=path)
