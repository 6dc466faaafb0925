"""Site config: YAML in, typed settings out.

The file is /etc/slurmkit/config.yaml unless `--config` or $SLURMKIT_CONFIG names another. A missing default file
means "all defaults"; a missing file that was asked for, a YAML syntax error, an unknown key or a wrong type is a
UsageError (exit 2) naming the file, the line and the key, with the closest valid key where there is one.

Each section is a dataclass below; its fields, with their types and defaults, are the schema. To add a setting,
add a field: the loader, the checks and the error messages follow from the type annotation.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import UsageError

DEFAULT_PATH = "/etc/slurmkit/config.yaml"


@dataclass
class SlurmSettings:
    backend: Literal["auto", "cli", "pyslurm"] = "auto"
    timeout: float = 10.0            # seconds for every call to a Slurm command
    bin_dir: str | None = None       # where sbatch/scontrol/sinfo live when they are not on PATH


@dataclass
class ToolsSettings:
    """Paths of the node tools the checks run (absolute paths recommended: prolog/epilog get no PATH)."""
    nvidia_smi: str = "nvidia-smi"
    dmesg: str = "dmesg"
    all_reduce_perf: str = "all_reduce_perf"


@dataclass
class PathsSettings:
    state_dir: str = "/var/lib/slurmkit"
    health_log: str = "/var/log/slurmkit/health.jsonl"


@dataclass
class DrainSettings:
    prefix: str = "slurmkit:"        # every reason slurmkit writes starts with this; the only reasons it may undo


def _check_signal(name: str, what: str, allow_none: bool = False) -> None:
    import signal as _signal
    n = name.strip().upper()
    if allow_none and n in ("NONE", ""):
        return
    if not n.startswith("SIG"):
        n = "SIG" + n
    if n not in _signal.Signals.__members__:
        raise ValueError(f"{what}: unknown signal {name!r} (e.g. USR2, TERM, INT{', none' if allow_none else ''})")


TRIGGER_FORBIDDEN = ("TERM", "INT", "KILL", "STOP", "CONT", "CHLD", "HUP", "QUIT")


@dataclass
class RunSettings:
    """`slurmkit run`, the job wrapper. Submit with `--signal=B:USR2@LEAD` where LEAD > grace + 30 s."""
    signal: str = "USR2"              # what Slurm sends before the time limit / at preemption: checkpoint + requeue
    checkpoint_signal: str = "TERM"   # what the child gets when asked to checkpoint; "none": only the flag file
    grace: float = 60.0               # seconds the child gets to checkpoint and exit before the requeue
    max_requeues: int = 10            # requeue only while SLURM_RESTART_COUNT is below this
    requeue_on: list[Literal["timeout", "preemption", "spot"]] = field(
        default_factory=lambda: ["timeout", "preemption", "spot"])
    timeout_window: float = 600.0     # signal with less than this left (or past 80% of the limit): a timeout
    master_port: int | None = None    # MASTER_PORT for multi-node jobs; null: 20000 + job id % 20000
    imds_endpoint: str | None = None  # e.g. http://169.254.169.254 to watch for AWS spot interruption notices
    imds_poll_interval: float = 5.0   # seconds between polls of spot/instance-action
    imds_timeout: float = 2.0         # seconds for each IMDS request
    spot_margin: float = 15.0         # after a spot notice, requeue this long before the announced time

    def __post_init__(self):
        _check_signal(self.signal, "signal")
        if self.signal.strip().upper().removeprefix("SIG") in TRIGGER_FORBIDDEN:
            raise ValueError(f"signal: {self.signal} cannot be the trigger (scancel and the time limit send TERM, "
                             "and a cancelled job must never requeue); use USR2")
        _check_signal(self.checkpoint_signal, "checkpoint_signal", allow_none=True)
        if self.grace < 0 or self.max_requeues < 0 or self.imds_poll_interval <= 0 or self.timeout_window < 0:
            raise ValueError("grace, max_requeues and timeout_window must be >= 0, imds_poll_interval > 0")


@dataclass
class TopologySettings:
    """`slurmkit topo` on a node: how long nvidia-smi/lscpu may take, where the CPU layout and GPU devices are."""
    timeout: float = 20.0            # seconds for `nvidia-smi topo -m` (it hangs on a GPU that fell off the bus)
    lscpu: str = "lscpu"             # fallback when sysfs has no CPU topology
    sysfs_root: str = "/"            # read <root>/sys/devices/system/{cpu,node}
    dev_dir: str = "/dev"            # File=<dev_dir>/nvidiaN in generated gres.conf lines


@dataclass
class SyncSettings:
    """The epilog's checkpoint sync (slurmkit/checkpoint/sync.py). Patterns may use only the variables in
    slurmkit.checkpoint.sync.VARIABLES ($SLURM_JOB_USER, $SLURM_JOB_ID, $SLURM_JOB_NAME, ...)."""
    enabled: bool = False
    source: str = ""                 # e.g. /local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
    dest: str = ""                   # e.g. /shared/ckpt/$SLURM_JOB_USER/$SLURM_JOB_NAME or s3://bucket/prefix
    keep: int = 3                    # complete checkpoints kept at the destination
    marker: str | None = None        # for other writers: a file whose presence marks a checkpoint complete
    algo: str = "sha256"             # hash for manifests built at sync time (sha256: SHA-NI, fastest measured)
    budget: float = 60.0             # seconds the epilog may spend; keep well below Slurm's EpilogMsgTime/timeout
    background: bool = True          # finish what the budget left over in a detached background sync
    job_file: str = ".slurmkit-sync.yaml"  # a job's narrowing file in its source dir (read as the job's user)
    workers: int = 2                 # files copied and hashed in parallel
    s3_endpoint: str | None = None   # S3-compatible endpoint URL (None: AWS)
    s3_region: str = "us-east-1"
    s3_part_size: int = 64 << 20     # multipart upload part size in bytes

    def __post_init__(self):
        if self.keep < 1:
            raise ValueError("keep must be at least 1")
        if self.budget <= 0:
            raise ValueError("budget must be positive")
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.s3_part_size < 5 << 20:
            raise ValueError("s3_part_size must be at least 5 MiB (the S3 minimum)")


@dataclass
class SubmitSettings:
    """`slurmkit submit` / `render`: where templates and node topology profiles live, and the site's defaults."""
    template_dirs: list[str] = field(default_factory=list)  # searched before the built-in templates/sbatch/
    # partition -> `slurmkit topo --json` document of its nodes (path; relative paths are next to this config)
    profiles: dict[str, str] = field(default_factory=dict)
    default_partition: str | None = None
    containers: bool = False         # the site runs pyxis/enroot: `container.image` becomes --container-image
    slurmkit_bin: str = "slurmkit"   # how jobs call `slurmkit run` on the compute nodes (absolute path is safest)
    signal_lead: int = 120           # seconds before the time limit Slurm sends USR2 (preemption/timeout notice)
    max_requeues: int = 3            # requeues `slurmkit run` may do before it lets the job end
    check_cluster: bool = True       # submit asks Slurm whether the partition and the GPUs per node exist


@dataclass
class InstallSettings:
    """`slurmkit install`: where things go on a node, how to reach it. Every target path may contain `{node}`."""
    root: str = ""                                  # prefix for every target path (tests: /tmp/x/{node})
    hooks_dir: str = "/etc/slurm/slurmkit"          # prolog and epilog go here
    config_path: str = "/etc/slurmkit/config.yaml"  # the site config on the node
    venv_dir: str = "/opt/slurmkit/venv"            # a symlink to venv-<bundle>, a venv with slurmkit
    wheel_dir: str = "/opt/slurmkit/wheels"         # the wheels the venv is built from
    stamp_path: str = "/etc/slurmkit/installed.json"  # what is installed (the version stamp)
    python: str = "python3"                         # the node's Python that creates the venv
    prolog_src: str | None = None                   # local script to install (default: the repo's prolog/prolog)
    epilog_src: str | None = None                   # (default: the repo's epilog/epilog)
    site_config_src: str | None = None              # local config to push (default: the one slurmkit loaded)
    wheelhouse: str | None = None                   # prebuilt wheels (slurmkit + node_packages); default: build
    node_packages: list[str] = field(default_factory=lambda: ["click", "PyYAML", "Jinja2", "MarkupSafe",
                                                              "ClusterShell"])
    parallel: int = 16                              # nodes at a time
    connect_timeout: float = 10.0                   # seconds: TCP connect, SSH handshake, authentication
    command_timeout: float = 120.0                  # seconds: each remote command and each file transfer
    ssh_config: str = "~/.ssh/config"
    known_hosts: str = "~/.ssh/known_hosts"
    user: str | None = None                         # default: SSH config, else the local user
    port: int | None = None                         # default: SSH config, else 22
    identity_file: str | None = None                # in addition to the SSH config's, the agent's and ~/.ssh/id_*
    prolog_epilog_timeout: int = 300                # the PrologEpilogTimeout= the printed slurm.conf lines ask for
    verify_timeout: float = 120.0                   # seconds for `slurmkit check --json` on a node

    def __post_init__(self):
        for name in ("root", "hooks_dir", "config_path", "venv_dir", "wheel_dir", "stamp_path"):
            v = getattr(self, name)
            if "\n" in v or "\0" in v:
                raise ValueError(f"{name}: a path cannot contain a newline")
            if name != "root" and not v.startswith("/"):
                raise ValueError(f"{name}: expected an absolute path, got {v!r}")
        if self.parallel < 1:
            raise ValueError("parallel: expected at least 1")


@dataclass
class AuditSettings:
    """`slurmkit audit`: what a drained GPU costs, how to re-run a check on a node, where node logs live."""
    price_per_gpu_hour: float = 0.0  # currency units per GPU-hour for the money figures; 0 = show GPU-hours only
    # argv that runs ONE check on a node and prints `slurmkit check --json` output; {node} and {check} are
    # filled in, each as one argument (never a shell string)
    recheck_command: list[str] = field(default_factory=lambda: [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "{node}",
        "slurmkit", "check", "--json", "--node", "{node}", "--only", "{check}"])
    recheck_timeout: float = 120.0
    # argv that prints a node's own health log (JSON lines) when the shared log has no record for a drain;
    # {node} and {path} (paths.health_log) are filled in; empty = only read the shared log
    node_log_command: list[str] = field(default_factory=list)
    node_log_timeout: float = 20.0
    evidence_per_node: int = 3        # newest matching health-log records shown per node
    evidence_window_minutes: int = 30 # a Slurm "Prolog error" matches slurmkit records this close to it
    causes_file: str | None = None    # a site's own cause table (default: slurmkit/data/audit_causes.yaml)


@dataclass
class GpuCountSettings:
    expected: int | None = None      # GPUs every node must show; None: the node's gres count when known
    per_node: dict[str, int] = field(default_factory=dict)   # hostlist -> expected count (wins over `expected`)


@dataclass
class EccSettings:
    volatile_uncorrectable_max: int = 0     # more volatile uncorrectable (DBE/DRAM/SRAM) errors than this: fail
    aggregate_sram_uncorrectable_max: int = 4   # lifetime SRAM uncorrectable above this: fail (RMA territory)
    fail_on_remap_pending: bool = True       # row remapping pending = needs a GPU reset
    fail_on_retired_pending: bool = True     # pending page blacklist (pre-A100) = needs a GPU reset
    require_ecc_enabled: bool = False        # ECC mode Disabled is a failure (Unknown Error always is)


@dataclass
class XidSettings:
    fatal_extra: list[int] = field(default_factory=list)     # codes to treat as fatal beyond the catalog
    ignore: list[int] = field(default_factory=list)          # codes never to act on
    unknown_status: Literal["ok", "warn", "fail"] = "warn"   # a code the catalog does not know
    log_file: str | None = None      # read this kernel log file (kern.log, messages) from where the last hook
                                     # stopped, instead of running `dmesg` (which reads the whole ring buffer)


@dataclass
class DriverSettings:
    driver_versions: list[str] = field(default_factory=list)   # allowed driver versions ("550.54.15"); empty: any
    cuda_versions: list[str] = field(default_factory=list)     # allowed CUDA versions ("12.4"); empty: any


@dataclass
class PcieSettings:
    min_width: int | None = None     # accept links at least this wide (else: current width must equal its max)
    min_gen: int | None = None       # the link's max generation must reach this (current gen drops when idle)
    status: Literal["warn", "fail"] = "fail"


@dataclass
class NvlinkSettings:
    status: Literal["warn", "fail"] = "fail"
    error_threshold: int = 1000      # an NVLink error counter above this is a finding (counters only grow)


@dataclass
class GpuProcsSettings:
    grace_seconds: float = 5.0       # epilog: wait this long for the job's processes to leave the GPUs
    max_memory_mib: int = 1024       # memory still used on a job GPU with no process: above this is a leftover


@dataclass
class NcclSettings:
    expected_busbw_gbps: float | None = None        # expected "Avg bus bandwidth" for this node's profile
    profiles: dict[str, float] = field(default_factory=dict)   # hostlist -> expected avg busbw (wins)
    min_ratio: float = 0.8           # fail below min_ratio * expected
    ttl_seconds: int = 86400         # the prolog trusts a cached result this long
    args: list[str] = field(default_factory=lambda: ["-b", "8", "-e", "1G", "-f", "2", "-g", "8"])
    timeout: float = 300.0


@dataclass
class HealthSettings:
    profiles: dict[str, list[str]] = field(default_factory=lambda: {
        "prolog": ["xid", "gpu_count", "ecc", "driver", "pcie", "gpu_procs", "nccl"],
        "epilog": ["xid", "ecc", "gpu_procs"],
        "full": ["xid", "gpu_count", "ecc", "driver", "pcie", "nvlink", "gpu_procs", "nccl"],
    })
    command_timeout: float = 10.0    # seconds for each nvidia-smi / dmesg call
    budget_seconds: float = 30.0     # a profile stops starting checks after this long (the rest: fail-closed)
    fail_closed: bool = True         # a check that cannot run (timeout, missing tool) fails (else: warn)
    drain: bool = True               # prolog/epilog drain the node on a failure


@dataclass
class EfficiencySettings:
    """Per-job GPU efficiency (slurmkit/efficiency): the sampler the prolog starts and the verdicts' thresholds."""
    enabled: bool = True              # the prolog starts a sampler for every job that holds GPUs
    interval: float = 10.0            # seconds between samples
    backend: Literal["auto", "nvml", "nvidia-smi"] = "auto"   # auto: NVML (nvidia-ml-py) when it imports
    min_samples: int = 3              # fewer readable samples: unknown
    idle_util_pct: float = 5.0        # a sample at or below this utilisation is idle ...
    idle_fraction: float = 0.9        # ... and a GPU idle in this share of its samples is idle
    underused_util_pct: float = 30.0  # mean utilisation under this: underused
    hung_util_pct: float = 90.0       # hung: utilisation at or above this ...
    hung_power_ratio: float = 0.35    # ... while power is under this share of the board's limit ...
    hung_seconds: float = 300.0       # ... for this long in a row
    held_memory_mib: float = 1024.0   # an idle GPU holding more than this is "memory held"
    samples_max_bytes: int = 4 << 20  # a job's sample file; past it the sampler halves its resolution
    log_max_bytes: int = 64 << 20     # the job-efficiency log; past it, it rotates to .1 (one generation kept)
    log: str | None = None            # default: efficiency.jsonl beside paths.health_log
    watchdog_interval: float = 5.0    # seconds between the sampler's "is my job still here?" checks
    start_grace: float = 120.0        # a job whose steps never appear in this long is gone
    steps_dir: str = "/tmp"           # where report_step() leaves a job's FLOPs (slurmkit-steps.<job id>) for MFU
    # `report idle --run-command`: argv run once per wasteful job; {job_id} {user} {account} {partition} {node}
    # {verdict} {gpu_hours} {wasted_gpu_hours} fill in, each one argument (never a shell string). Empty: nothing sent
    idle_command: list[str] = field(default_factory=list)
    idle_command_timeout: float = 30.0

    def __post_init__(self):
        for name, lo, hi in (("interval", 0.05, 3600), ("idle_util_pct", 0, 100), ("idle_fraction", 0.01, 1),
                             ("underused_util_pct", 0, 100), ("hung_util_pct", 1, 100),
                             ("hung_power_ratio", 0.01, 1), ("hung_seconds", 0.1, 86400),
                             ("min_samples", 1, 100000), ("held_memory_mib", 0, 1 << 24),
                             ("samples_max_bytes", 64 << 10, 1 << 30), ("log_max_bytes", 1 << 20, 1 << 40),
                             ("watchdog_interval", 0.1, 3600), ("start_grace", 1, 86400)):
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise ValueError(f"{name}: expected {lo:g} to {hi:g}, got {v:g}")
        if self.idle_util_pct >= self.underused_util_pct and self.underused_util_pct > 0:
            raise ValueError("idle_util_pct must be below underused_util_pct")


@dataclass
class Settings:
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    tools: ToolsSettings = field(default_factory=ToolsSettings)
    paths: PathsSettings = field(default_factory=PathsSettings)
    drain: DrainSettings = field(default_factory=DrainSettings)
    submit: SubmitSettings = field(default_factory=SubmitSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    install: InstallSettings = field(default_factory=InstallSettings)
    run: RunSettings = field(default_factory=RunSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    gpu_count: GpuCountSettings = field(default_factory=GpuCountSettings)
    ecc: EccSettings = field(default_factory=EccSettings)
    xid: XidSettings = field(default_factory=XidSettings)
    driver: DriverSettings = field(default_factory=DriverSettings)
    pcie: PcieSettings = field(default_factory=PcieSettings)
    nvlink: NvlinkSettings = field(default_factory=NvlinkSettings)
    gpu_procs: GpuProcsSettings = field(default_factory=GpuProcsSettings)
    nccl: NcclSettings = field(default_factory=NcclSettings)
    efficiency: EfficiencySettings = field(default_factory=EfficiencySettings)
    # where the settings came from, and the line of each key ("slurm.timeout" -> 3), for messages
    source: str | None = field(default=None, metadata={"internal": True})
    lines: dict[str, int] = field(default_factory=dict, metadata={"internal": True})


def config_path(explicit: str | None = None) -> tuple[str, bool]:
    """The config path to use, and whether the user asked for it (then it must exist)."""
    if explicit:
        return explicit, True
    env = os.environ.get("SLURMKIT_CONFIG")
    if env:
        return env, True
    return DEFAULT_PATH, False


def load(explicit: str | None = None) -> Settings:
    path, required = config_path(explicit)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if required:
            raise UsageError("config file not found", path=path) from None
        return Settings()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read config: {e}", path=path) from None
    return loads(text, path)


def loads(text: str, path: str = "<config>") -> Settings:
    return parse_yaml(text, Settings, path)


# --- a small typed YAML loader that keeps line numbers -------------------------------------------------------

def parse_yaml(text: str, schema: type, path: str, *, top: str = "") -> Any:
    """Parse YAML text into an instance of the dataclass `schema`, with errors that name path:line and key."""
    import yaml  # not at module level: most commands never read YAML

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise UsageError(f"YAML syntax error: {e.problem or e.context}", path=path, line=line) from None
    except yaml.YAMLError as e:
        raise UsageError(f"YAML error: {e}", path=path) from None
    lines: dict[str, int] = {}
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
        obj = schema()
    else:
        obj = _convert(node, schema, top, path, lines)
    if any(f.name == "source" for f in dataclasses.fields(schema)):
        obj.source = path
        obj.lines = lines
    return obj


def _line(node) -> int:
    return node.start_mark.line + 1


def _kind(node) -> str:
    import yaml
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    tag = node.tag.rsplit(":", 1)[-1]
    return {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
            "null": "null"}.get(tag, tag) + f" ({node.value!r})"


def _typename(tp) -> str:
    origin = typing.get_origin(tp)
    if tp is str:
        return "a string"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_typename(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return str(tp)


def _hints(cls) -> dict[str, Any]:
    mod = sys.modules.get(cls.__module__)
    return typing.get_type_hints(cls, vars(mod) if mod else None)


def _convert(node, tp, key: str, path: str, lines: dict[str, int]):
    import yaml

    if key:
        lines.setdefault(key, _line(node))
    label = key or "the top level"
    origin = typing.get_origin(tp)
    if tp is Any:
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(node, a, key, path, lines)
            except UsageError as e:
                errors.append(e)
        raise UsageError(f"{label}: expected {_typename(tp)}, got {_kind(node)}", path=path, line=_line(node))
    if dataclasses.is_dataclass(tp):
        if not isinstance(node, yaml.MappingNode):
            raise UsageError(f"{label}: expected a mapping, got {_kind(node)}", path=path, line=_line(node))
        hints = _hints(tp)
        names = [f.name for f in dataclasses.fields(tp) if not f.metadata.get("internal")]
        kwargs = {}
        for knode, vnode in node.value:
            k = str(knode.value)
            sub = f"{key}.{k}" if key else k
            if k not in names:
                hint = difflib.get_close_matches(k, names, n=1)
                msg = f"unknown key '{sub}'"
                msg += f"; did you mean '{hint[0]}'?" if hint else f" (expected one of: {', '.join(names)})"
                raise UsageError(msg, path=path, line=_line(knode))
            if k in kwargs:
                raise UsageError(f"duplicate key '{sub}'", path=path, line=_line(knode))
            lines[sub] = _line(knode)
            kwargs[k] = _convert(vnode, hints[k], sub, path, lines)
        try:
            return tp(**kwargs)
        except (TypeError, ValueError) as e:  # a __post_init__ check
            raise UsageError(f"{label}: {e}", path=path, line=_line(node)) from None
    if origin in (list, tuple):
        (item,) = typing.get_args(tp)[:1] or (Any,)
        if not isinstance(node, yaml.SequenceNode):
            raise UsageError(f"{label}: expected a list, got {_kind(node)}", path=path, line=_line(node))
        return [_convert(n, item, f"{key}[{i}]", path, lines) for i, n in enumerate(node.value)]
    if origin is dict:
        _, vt = typing.get_args(tp)
        if not isinstance(node, yaml.MappingNode):
            raise UsageError(f"{label}: expected a mapping, got {_kind(node)}", path=path, line=_line(node))
        out = {}
        for knode, vnode in node.value:
            k = str(knode.value)
            out[k] = _convert(vnode, vt, f"{key}.{k}" if key else k, path, lines)
        return out
    if not isinstance(node, yaml.ScalarNode):
        raise UsageError(f"{label}: expected {_typename(tp)}, got {_kind(node)}", path=path, line=_line(node))
    tag = node.tag.rsplit(":", 1)[-1]
    if origin is Literal:
        allowed = typing.get_args(tp)
        if node.value in [str(a) for a in allowed]:
            return next(a for a in allowed if str(a) == node.value)
        hint = difflib.get_close_matches(node.value, [str(a) for a in allowed], n=1)
        msg = f"{label}: expected {_typename(tp)}, got {node.value!r}"
        raise UsageError(msg + (f"; did you mean {hint[0]!r}?" if hint else ""), path=path, line=_line(node))
    if tp is str:
        if tag == "null":
            raise UsageError(f"{label}: expected a string, got null", path=path, line=_line(node))
        return node.value  # the text as written: `cuda: 12.10` stays "12.10", not the float 12.1
    if tp is bool:
        if tag != "bool":
            raise UsageError(f"{label}: expected true or false, got {_kind(node)}", path=path, line=_line(node))
        return node.value.lower() in ("true", "yes", "on", "y")
    if tp is int:
        if tag != "int":
            raise UsageError(f"{label}: expected an integer, got {_kind(node)}", path=path, line=_line(node))
        return yaml.constructor.SafeConstructor().construct_yaml_int(node)
    if tp is float:
        if tag not in ("int", "float"):
            raise UsageError(f"{label}: expected a number, got {_kind(node)}", path=path, line=_line(node))
        return float(yaml.constructor.SafeConstructor().construct_object(node))
    raise TypeError(f"config schema: unsupported type {tp!r} for {label}")
