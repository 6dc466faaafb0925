"""The site settings: one typed schema for every caller (commands, hooks, the checkpoint sync).

Each section is a record (slurmkit/record.py); its fields, with their types and defaults, are the schema. Every numeric field has
a documented valid range (`num(default, lo, hi)`, kept in the field's metadata as a `Range`); NaN and infinity
are never valid. The ranges are checked whenever a section is made, whether by the YAML loader
(slurmkit/config.py: file:line:key errors) or from install's settings file (slurmkit/nodesettings.py), so
there is one settings type and one validation. Standard library only: the hooks import this, never PyYAML.

To add a setting, add a field (a numeric one with `num(...)`); the loader, the checks, the error messages and
the reference docs (`reference()`) follow from the type annotation and the metadata.
"""

from __future__ import annotations

from ..record import MISSING, asdict, field, fields
from typing import TYPE_CHECKING

from .checks import *  # noqa: F403 - every section's name is importable from slurmkit.settings
from .checks import (
    DcgmSettings,
    DriverSettings,
    DstateSettings,
    EccSettings,
    EfficiencySettings,
    FabricSettings,
    GpuConfigSettings,
    GpuCountSettings,
    GpuProcsSettings,
    HealthSettings,
    IbSettings,
    IdlePolicySettings,
    NcclSettings,
    NvlinkSettings,
    PcieSettings,
    TemperatureSettings,
    VbiosSettings,
    ClocksSettings,
    XidSettings,
)
from .fields import *  # noqa: F403
from .fields import DAY, TRIGGER_FORBIDDEN, Range, RangeError, Section, _check_signal, check_ranges, num  # noqa: F401
from .ops import *  # noqa: F403
from .ops import (
    AgentSettings,
    AuditSettings,
    DrainSettings,
    InstallSettings,
    PathsSettings,
    RunSettings,
    SlurmSettings,
    SubmitSettings,
    SyncSettings,
    ToolsSettings,
    TopologySettings,
)
from .overrides import Override

if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = "/etc/slurmkit/config.yaml"


class Settings(Section):
    """The whole site config: one section per concern."""

    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    tools: ToolsSettings = field(default_factory=ToolsSettings)
    paths: PathsSettings = field(default_factory=PathsSettings)
    drain: DrainSettings = field(default_factory=DrainSettings)
    submit: SubmitSettings = field(default_factory=SubmitSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    install: InstallSettings = field(default_factory=InstallSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    run: RunSettings = field(default_factory=RunSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    gpu_count: GpuCountSettings = field(default_factory=GpuCountSettings)
    ecc: EccSettings = field(default_factory=EccSettings)
    xid: XidSettings = field(default_factory=XidSettings)
    driver: DriverSettings = field(default_factory=DriverSettings)
    pcie: PcieSettings = field(default_factory=PcieSettings)
    clocks: ClocksSettings = field(default_factory=ClocksSettings)
    fabric: FabricSettings = field(default_factory=FabricSettings)
    temperature: TemperatureSettings = field(default_factory=TemperatureSettings)
    vbios: VbiosSettings = field(default_factory=VbiosSettings)
    gpu_config: GpuConfigSettings = field(default_factory=GpuConfigSettings)
    dstate: DstateSettings = field(default_factory=DstateSettings)
    ib: IbSettings = field(default_factory=IbSettings)
    nvlink: NvlinkSettings = field(default_factory=NvlinkSettings)
    gpu_procs: GpuProcsSettings = field(default_factory=GpuProcsSettings)
    nccl: NcclSettings = field(default_factory=NcclSettings)
    dcgm: DcgmSettings = field(default_factory=DcgmSettings)
    efficiency: EfficiencySettings = field(default_factory=EfficiencySettings)
    idle_policy: IdlePolicySettings = field(default_factory=IdlePolicySettings)
    # per-node settings: entries selecting nodes by hostlist or Slurm feature (settings/overrides.py)
    overrides: list[Override] = field(default_factory=list, metadata={"not_section": True})
    # where the settings came from, and the line of each key ("slurm.timeout" -> 3), for messages
    source: str | None = field(default=None, metadata={"internal": True})
    lines: dict[str, int] = field(default_factory=dict, metadata={"internal": True})


SECTIONS: dict[str, type] = {
    f.name: f.default_factory
    for f in fields(Settings)
    if not f.metadata.get("internal") and not f.metadata.get("not_section")
}


def to_dict(s: Settings) -> dict[str, dict[str, Any]]:
    """The settings as plain JSON-able data (sections only), the inverse of from_dict."""
    return {name: asdict(getattr(s, name)) for name in SECTIONS}


def from_dict(
    data: dict[str, dict[str, Any]], *, source: str | None = None, lines: dict[str, int] | None = None
) -> Settings:
    """Settings rebuilt from to_dict() data: the real sections, ranges checked again. A key the schema does
    not know raises TypeError, a bad value ValueError (the hooks' cache then parses the YAML instead)."""
    if set(data) - set(SECTIONS):
        raise TypeError(f"unknown sections: {sorted(set(data) - set(SECTIONS))}")
    s = Settings(**{name: SECTIONS[name](**vals) for name, vals in data.items()})
    s.source = source
    s.lines = dict(lines or {})
    return s


def type_hints(cls) -> dict:
    """The resolved field types of a settings class (typing.get_type_hints, given the typing names the
    annotations use: this module does not import typing, which the hooks would pay for on every job)."""
    import typing

    return typing.get_type_hints(cls, None, {"Any": typing.Any, "Literal": typing.Literal})


def reference() -> list[tuple[str, str, str, str]]:
    """(key, type, default, valid range or '') for every setting, for the generated config reference."""
    out = []
    for name, cls in SECTIONS.items():
        hints = type_hints(cls)
        for f in fields(cls):
            default = f.default if f.default is not MISSING else f.default_factory()
            rng = f.metadata.get("range")
            out.append(
                (f"{name}.{f.name}", str(hints[f.name]).replace("typing.", ""), repr(default), str(rng) if rng else "")
            )
    return out
