"""A partition's topology profile (`slurmkit topo --json`, named in submit.profiles) as the render reads it: found
relative to the site config, checked before the binding planner trusts it, and the CPUs per GPU it implies."""

from __future__ import annotations

import json
import os

from ..errors import UsageError
from ..topology.binding import validate_profile


def load_profile(settings, partition: str | None) -> tuple[dict | None, str | None]:
    """The partition's `slurmkit topo --json` document from the site config (path relative to the config)."""
    profiles = settings.submit.profiles
    if not partition or partition not in profiles:
        return None, None
    p = os.path.expanduser(profiles[partition])
    if not os.path.isabs(p) and settings.source:
        p = os.path.join(os.path.dirname(os.path.realpath(settings.source)), p)
    p = os.path.realpath(p)
    key = f"submit.profiles.{partition}"
    from ..bounded import read_text

    try:
        text = read_text(p, what="topology profile")
        doc = json.loads(text)
    except UsageError as e:
        raise UsageError(f"{key}: {e}", path=settings.source, line=settings.lines.get(key)) from None
    except ValueError as e:
        raise UsageError(
            f"{key}: cannot read topology profile {p}: {e}", path=settings.source, line=settings.lines.get(key)
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise UsageError(
            f'{key}: {p} is not a `slurmkit topo --json` document (no "gpus" list)',
            path=settings.source,
            line=settings.lines.get(key),
        )
    try:  # every GPU an object with cpus/numa/links of the right types: the planner trusts its input
        validate_profile(doc, path=p)
    except UsageError as e:
        raise UsageError(f"{key}: {e}", path=settings.source, line=settings.lines.get(key)) from None
    return doc, str(p)


def profile_cpus_per_gpu(profile: dict) -> int | None:
    """CPUs per GPU from a profile alone: the CPUs of the node (union of the GPUs' affinities) / GPUs."""
    gpus = profile.get("gpus") or []
    cpus: set[int] = set()
    for g in gpus:
        cpus.update(g.get("cpus") or [])
    if not gpus or not cpus:
        return None
    return max(1, len(cpus) // len(gpus))
