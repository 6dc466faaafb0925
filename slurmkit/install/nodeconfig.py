"""The site config each node gets. Without `overrides:` every node gets the site config's own bytes; with them,
each node gets its merged settings (settings/overrides.py) as YAML: the keys that differ from the defaults, under
a header naming the site config and the overrides applied, checked to load back to the very same settings.
Overrides selected by Slurm node feature need the features: `node_features` asks `sinfo` (with a timeout).
"""

from __future__ import annotations

from ..errors import CommandError, SlurmkitError, UsageError


class FeaturesUnknown(SlurmkitError):
    """Slurm did not answer: which overrides apply cannot be known (exit 3, "could not find out")."""

    exit_code = 3


def node_features(settings) -> dict[str, list[str]]:
    """node -> its Slurm features (`sinfo -h -N -o '%N|%f'`, AvailableFeatures); raises FeaturesUnknown."""
    import os

    from .. import proc

    sinfo = os.path.join(settings.slurm.bin_dir, "sinfo") if settings.slurm.bin_dir else "sinfo"
    try:
        out = proc.run([sinfo, "-h", "-N", "-o", "%N|%f"], timeout=settings.slurm.timeout).stdout
    except CommandError as e:
        raise FeaturesUnknown(
            f"overrides select nodes by feature, and sinfo did not answer: {e} (offline: slurmkit config --features)"
        ) from None
    return parse_features(out)


def parse_features(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        node, sep, feats = line.strip().partition("|")
        if sep and node:
            have = [] if feats.strip() in ("", "(null)") else [f.strip() for f in feats.split(",") if f.strip()]
            out.setdefault(node, [])
            out[node] += [f for f in have if f not in out[node]]
    return out


def features_for(settings, nodes: list[str], lookup=node_features) -> dict[str, list[str] | None]:
    """Each node's features when an override needs them (else None each); a node Slurm does not know is refused:
    a features entry could not be matched against it."""
    from ..settings.overrides import needs_features

    if not needs_features(settings):
        return dict.fromkeys(nodes)
    have = lookup(settings)
    unknown = [n for n in nodes if n not in have]
    if unknown:
        raise UsageError(
            f"overrides select nodes by feature, and Slurm does not know {', '.join(unknown)} (sinfo -N): "
            "their features are unknown"
        )
    return {n: have[n] for n in nodes}


def render(merged, node: str, site_path: str | None, applied: list[str]) -> bytes:
    """The node's config file: the merged settings' non-default keys as YAML, loaded back and compared."""
    import yaml

    from .. import config
    from ..settings import Settings, to_dict

    want, default = to_dict(merged), to_dict(Settings())
    doc = {
        sec: {k: v for k, v in vals.items() if v != default[sec][k]}
        for sec, vals in want.items()
        if any(v != default[sec][k] for k, v in vals.items())
    }
    head = (
        f"# written by `slurmkit install` for node {node} from {site_path}: the site config with "
        + (", ".join(applied) if applied else "no override")
        + " applied.\n# Edit the site config (then install again), not this file; "
        f"`slurmkit config --node {node}` shows where each value came from.\n"
    )
    text = head + (yaml.safe_dump(doc, sort_keys=True, default_flow_style=False) if doc else "")
    if to_dict(config.loads(text, f"<{node}>")) != want:
        raise SlurmkitError(f"node {node}: its merged config does not load back to the same settings")
    return text.encode()


def configs(site, site_bytes: bytes, nodes: list[str], features: dict) -> dict[str, bytes]:
    """node -> the bytes of its config file (the site's own bytes when it has no overrides)."""
    from ..settings.overrides import merge

    if not site.overrides:
        return dict.fromkeys(nodes, site_bytes)
    out = {}
    for n in nodes:
        merged, sources = merge(site, n, features.get(n))
        applied = sorted({s.split(" (", 1)[1].rstrip(")") for s in sources.values() if " (overrides[" in s})
        out[n] = render(merged, n, site.source, applied)
    return out
