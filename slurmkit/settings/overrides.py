"""Per-node settings: the site config's `overrides:` list, each entry selecting nodes by hostlist or by Slurm node
feature (the anchor: NHC's per-host-pattern lines) and setting keys of any section but `install`:

    overrides:
      - nodes: gpu[001-016]            # a hostlist, or:
        set: {nvlink: {expected_inactive: 6}}
      - features: [nodcgm]             # every node with ALL these Slurm features (sinfo %f)
        set: {dcgm: {enabled: false}}

Later entries win over earlier ones. The loader (slurmkit/config.py) calls `check()` once the file is read: every
key and value is checked like the same key at the top level, the error naming the file, the override's line and
key. `merge()` is pure: the settings + a node's name and features in, that node's settings and the source of
every value out. `slurmkit install` writes each node its merged settings; `slurmkit config --node` shows them.
"""

from __future__ import annotations

from ..record import field, replace
from typing import TYPE_CHECKING

from .fields import Section

if TYPE_CHECKING:
    from typing import Any

NOT_PER_NODE = ("install",)  # one install run has one install section: how nodes are reached is not per node


class Override(Section):
    """Settings for some nodes only, NHC-style: each entry of the `overrides:` list selects nodes by hostlist
    (`nodes`) or by Slurm node feature (`features`) and sets keys of any section but `install` (`set`); later
    entries win. `slurmkit install` writes each node its merged settings; `slurmkit config --node NAME` shows a
    node's effective value of every key and where it came from."""

    nodes: str | None = None  # the nodes it applies to, a hostlist: gpu[001-016],gpu100
    features: list[str] = field(default_factory=list)  # or: the nodes with all these Slurm node features
    set: dict[str, dict[str, Any]] = field(default_factory=dict)  # section -> key -> value, as at the top level
    line: int = field(default=0, metadata={"internal": True})
    hosts: frozenset = field(default_factory=frozenset, metadata={"internal": True})

    def describe(self, i: int) -> str:
        return f"overrides[{i}] " + (f"nodes {self.nodes}" if self.nodes else "features " + ",".join(self.features))

    def matches(self, node: str, features: list[str] | None) -> bool:
        if self.nodes is not None:
            return node in self.hosts
        return features is not None and all(f in features for f in self.features)


def check(settings, parse) -> None:
    """Validate settings.overrides in place (typed values, expanded hostlists). `parse(text) -> Settings` is the
    loader on a one-key YAML document: the same types, ranges and checks as the top level; its error is raised
    again with the override key's own line."""
    from ..errors import UsageError
    from . import SECTIONS

    path, lines = settings.source, settings.lines
    for i, o in enumerate(settings.overrides):
        base = f"overrides[{i}]"
        o.line = lines.get(base, 0)
        if (o.nodes is None) == (not o.features):
            raise UsageError(f"{base}: give exactly one of nodes (a hostlist) or features", path=path, line=o.line)
        if o.nodes is not None:
            from ..slurm import expand_hostlist

            try:
                o.hosts = frozenset(expand_hostlist(o.nodes))
            except Exception as e:  # noqa: BLE001 - ClusterShell's or our parser's error, said with the line
                raise UsageError(
                    f"{base}.nodes: not a hostlist ({e})", path=path, line=lines.get(f"{base}.nodes")
                ) from None
        if not o.set:
            raise UsageError(f"{base}.set: nothing to set", path=path, line=lines.get(f"{base}.set", o.line))
        typed: dict[str, dict[str, Any]] = {}
        for sec, keys in o.set.items():
            where = f"{base}.set.{sec}"
            if sec in NOT_PER_NODE:
                raise UsageError(f"{where}: the {sec} section cannot differ per node", path=path, line=lines.get(where))
            if sec not in SECTIONS:
                raise UsageError(
                    f"{where}: unknown section (expected one of: {', '.join(s for s in SECTIONS if s not in NOT_PER_NODE)})",
                    path=path,
                    line=lines.get(where),
                )
            if not isinstance(keys, dict):
                raise UsageError(f"{where}: expected a mapping of keys", path=path, line=lines.get(where))
            typed[sec] = {}
            for key, value in keys.items():
                import json

                k = f"{where}.{key}"
                try:
                    one = parse(json.dumps({sec: {key: value}}))
                except UsageError as e:
                    raise UsageError(f"{base}.set: {e.message}", path=path, line=lines.get(k, o.line)) from None
                typed[sec][key] = getattr(getattr(one, sec), key)
        o.set = typed


def merge(settings, node: str, features: list[str] | None = None):
    """(this node's settings, {key: source}) where source is "default", "<file>:<line>" or
    "<file>:<line> (overrides[i] nodes ...)". `features` None: not known (a features entry then cannot match; the
    caller asks Slurm when any entry needs them). A combination a section refuses raises UsageError."""
    from ..errors import UsageError
    from . import SECTIONS, from_dict, to_dict

    data = to_dict(settings)
    sources: dict[str, str] = {}
    for sec, vals in data.items():
        for key in vals:
            k = f"{sec}.{key}"
            sources[k] = f"{settings.source}:{settings.lines[k]}" if k in settings.lines else "default"
    applied = []
    for i, o in enumerate(settings.overrides):
        if not o.matches(node, features):
            continue
        applied.append(i)
        for sec, vals in o.set.items():
            for key, value in vals.items():
                data[sec][key] = value
                line = settings.lines.get(f"overrides[{i}].set.{sec}.{key}", o.line)
                sources[f"{sec}.{key}"] = f"{settings.source}:{line} ({o.describe(i)})"
    if not applied:
        merged = replace(settings, overrides=[])
        return merged, sources
    try:
        merged = from_dict({s: data[s] for s in SECTIONS}, source=settings.source, lines=settings.lines)
    except (TypeError, ValueError) as e:
        raise UsageError(
            f"node {node}: with {', '.join(settings.overrides[i].describe(i) for i in applied)}: {e}",
            path=settings.source,
            line=settings.overrides[applied[-1]].line,
        ) from None
    return merged, sources


def needs_features(settings) -> bool:
    return any(o.nodes is None for o in settings.overrides)
