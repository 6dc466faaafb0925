"""The site settings: one typed schema for every caller (commands, hooks, the checkpoint sync).

Each section is a dataclass; its fields, with their types and defaults, are the schema. Every numeric field has
a documented valid range (`num(default, lo, hi)`, kept in the field's metadata as a `Range`); NaN and infinity
are never valid. The ranges are checked whenever a section is made, whether by the YAML loader
(slurmkit/config.py: file:line:key errors) or by the hooks' JSON cache (slurmkit/hooks/settings_cache.py), so
there is one settings type and one validation. Standard library only: the hooks import this, never PyYAML.

To add a setting, add a field (a numeric one with `num(...)`); the loader, the checks, the error messages and
the reference docs (`reference()`) follow from the type annotation and the metadata.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Literal

DEFAULT_PATH = "/etc/slurmkit/config.yaml"


class Range:
    """A closed-or-open interval of valid numbers: lo/hi None = unbounded on that side (but always finite)."""

    __slots__ = ("lo", "hi", "lo_open", "hi_open")

    def __init__(
        self, lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False
    ) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    def __contains__(self, v: object) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        if self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi):
            return False
        return True

    def __str__(self) -> str:
        def fmt(x: float) -> str:
            return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)

        lo = "-inf" if self.lo is None else fmt(self.lo)
        hi = "inf" if self.hi is None else fmt(self.hi)
        return f"{'(' if self.lo_open or self.lo is None else '['}{lo}, {hi}{')' if self.hi_open or self.hi is None else ']'}"


class RangeError(ValueError):
    """A numeric setting outside its valid range; `key` is the field's name (the loader adds its line)."""

    def __init__(self, key: str, detail: str):
        super().__init__(f"{key}: {detail}")
        self.key = key
        self.detail = detail


def num(
    default: Any = dataclasses.MISSING,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A numeric field (or a list/dict of numbers: the range applies to each item/value) with its valid range."""
    md = {"range": Range(lo, hi, lo_open, hi_open)}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=md)
    return field(default=default, metadata=md)


def _fmt(v: object) -> str:
    return repr(v) if not isinstance(v, float) else ("nan" if math.isnan(v) else repr(v))


def check_ranges(obj: object) -> None:
    """Raise RangeError for the first numeric field of the dataclass `obj` outside its range (None passes:
    an optional setting left unset). NaN/inf are refused wherever a number is expected."""
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        rng = f.metadata.get("range")
        v = getattr(obj, f.name)
        if rng is None:
            if isinstance(v, float) and not math.isfinite(v):
                raise RangeError(f.name, f"expected a finite number, got {_fmt(v)}")
            continue
        items: list[tuple[str, object]]
        if isinstance(v, dict):
            items = [(f"{f.name}.{k}", x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)):
            items = [(f"{f.name}[{i}]", x) for i, x in enumerate(v)]
        else:
            items = [(f.name, v)]
        for key, x in items:
            if x is None or x in rng:
                continue
            what = "an integer" if isinstance(x, int) and not isinstance(x, bool) else "a number"
            raise RangeError(key, f"expected {what} in {rng}, got {_fmt(x)}")


class Section:
    """Base of every settings section: numeric ranges checked when the section is made.

    The sections are `@section` dataclasses (dataclasses.fields, asdict and replace work on them) whose
    __init__ (keywords only), equality and repr come from here, field by field: a generated method costs an exec
    at import, some 20 ms for the whole schema, and every hook imports this module."""

    def __init__(self, **kw: Any) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in kw:
                v = kw.pop(f.name)
            elif f.default is not dataclasses.MISSING:
                v = f.default
            elif f.default_factory is not dataclasses.MISSING:
                v = f.default_factory()
            else:
                raise TypeError(f"{type(self).__name__}: missing {f.name!r}")
            object.__setattr__(self, f.name, v)
        if kw:
            raise TypeError(f"{type(self).__name__}: unexpected keyword argument {next(iter(kw))!r}")
        self.__post_init__()

    def __post_init__(self) -> None:
        check_ranges(self)

    def _values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))  # type: ignore
        return f"{type(self).__name__}({inner})"


section = dataclass(init=False, repr=False, eq=False)


@section
class SlurmSettings(Section):
    """How slurmkit calls Slurm."""

    backend: Literal["auto", "cli", "pyslurm"] = "auto"  # auto: pyslurm only where it matches the Slurm version
    timeout: float = num(10.0, 0, 3600, lo_open=True)  # seconds for every call to a Slurm command
    bin_dir: str | None = None  # where sbatch/scontrol/sinfo live when they are not on PATH


@section
class ToolsSettings(Section):
    """The node tools the checks run: a path (absolute recommended: prolog/epilog get no PATH), or an argv list
    the tool's own arguments are appended to, e.g. [env, SLURMKIT_FAKEGPU_SCENARIO=/x, /opt/fake/nvidia-smi]."""

    nvidia_smi: str | list[str] = "nvidia-smi"  # GPU state (-q), topology (topo -m), NVLink (nvlink -s/-e)
    dmesg: str | list[str] = "dmesg"  # the kernel log the xid check reads (see xid.log_file)
    all_reduce_perf: str | list[str] = "all_reduce_perf"  # nccl-tests, for the nccl check (args: nccl.args)
    dcgmi: str | list[str] = "dcgmi"  # NVIDIA DCGM's CLI, for the dcgm check (dcgmi diag)


@section
class PathsSettings(Section):
    """Where slurmkit keeps its state and its health log on a node."""

    state_dir: str = "/var/lib/slurmkit"  # per-node marks: Xid lines seen, the cached NCCL result
    # one JSON line per check run; audit reads its evidence. A directory: one file per node (<node>.jsonl, each
    # written only by its node: safe on NFS, rotated by size); a path ending in .jsonl/.json/.log: one shared file
    health_log: str = "/var/log/slurmkit/health/"


@section
class DrainSettings(Section):
    """The drain etiquette: the prefix that marks a reason as slurmkit's."""

    prefix: str = "slurmkit:"  # every reason slurmkit writes starts with this; the only reasons it may undo


def _check_signal(name: str, what: str, allow_none: bool = False) -> None:
    from .signals import is_name

    if allow_none and name.strip().upper() in ("NONE", ""):
        return
    if not is_name(name):
        raise ValueError(f"{what}: unknown signal {name!r} (e.g. USR2, TERM, INT{', none' if allow_none else ''})")


TRIGGER_FORBIDDEN = ("TERM", "INT", "KILL", "STOP", "CONT", "CHLD", "HUP", "QUIT")
DAY = 86400.0


@section
class RunSettings(Section):
    """`slurmkit run`, the job wrapper. Submit with `--signal=B:USR2@LEAD` where LEAD > grace + 30 s."""

    signal: str = "USR2"  # what Slurm sends before the time limit / at preemption: checkpoint + requeue
    checkpoint_signal: str = "TERM"  # what the child gets when asked to checkpoint; "none": only the flag file
    grace: float = num(60.0, 0, DAY)  # seconds the child gets to checkpoint and exit before the requeue
    max_requeues: int = num(10, 0, 100000)  # requeue only while SLURM_RESTART_COUNT is below this
    # which notices make `slurmkit run` checkpoint and requeue the job
    requeue_on: list[Literal["timeout", "preemption", "spot"]] = field(
        default_factory=lambda: ["timeout", "preemption", "spot"]
    )
    timeout_window: float = num(600.0, 0, 30 * DAY)  # signal with less than this left (or past 80%): a timeout
    master_port: int | None = num(None, 1, 65535)  # MASTER_PORT for multi-node jobs; null: 20000 + job id % 20000
    imds_endpoint: str | None = None  # e.g. http://169.254.169.254 to watch for AWS spot interruption notices
    imds_poll_interval: float = num(5.0, 0, 3600, lo_open=True)  # seconds between polls of spot/instance-action
    imds_timeout: float = num(2.0, 0, 600, lo_open=True)  # seconds for each IMDS request
    spot_margin: float = num(15.0, 0, 3600)  # after a spot notice, requeue this long before the announced time

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_signal(self.signal, "signal")
        if self.signal.strip().upper().removeprefix("SIG") in TRIGGER_FORBIDDEN:
            raise ValueError(
                f"signal: {self.signal} cannot be the trigger (scancel and the time limit send TERM, "
                "and a cancelled job must never requeue); use USR2"
            )
        _check_signal(self.checkpoint_signal, "checkpoint_signal", allow_none=True)


@section
class TopologySettings(Section):
    """`slurmkit topo` on a node: how long nvidia-smi/lscpu may take, where the CPU layout and GPU devices are."""

    timeout: float = num(20.0, 0, 3600, lo_open=True)  # seconds for `nvidia-smi topo -m` (hangs on a lost GPU)
    lscpu: str = "lscpu"  # fallback when sysfs has no CPU topology
    sysfs_root: str = "/"  # read <root>/sys/devices/system/{cpu,node}
    dev_dir: str = "/dev"  # File=<dev_dir>/nvidiaN in generated gres.conf lines


# the hashes a checkpoint manifest may name: fixed-length digests only (shake_* need a length; an unknown name
# must be a clear error, never a hashing thread that dies while the copier waits)
HASH_ALGOS = (
    "sha256",
    "sha512",
    "sha384",
    "sha224",
    "sha1",
    "blake2b",
    "blake2s",
    "sha3_256",
    "sha3_512",
    "sha3_384",
    "sha3_224",
    "md5",
)
S3_DEFAULT_REGION = "us-east-1"
S3_MIN_PART = 5 << 20  # the S3 minimum multipart part size
S3_DEFAULT_PART = 64 << 20


@section
class SyncSettings(Section):
    """The epilog's checkpoint sync (slurmkit/checkpoint/). Patterns may use only the variables in
    slurmkit.checkpoint.layout.VARIABLES ($SLURM_JOB_USER, $SLURM_JOB_ID, $SLURM_JOB_NAME, ...)."""

    enabled: bool = False  # the epilog syncs checkpoints only when true
    source: str = ""  # e.g. /local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
    dest: str = ""  # e.g. /shared/ckpt/$SLURM_JOB_USER/$SLURM_JOB_NAME or s3://bucket/prefix
    keep: int = num(3, 1, 100000)  # complete checkpoints kept at the destination
    marker: str | None = None  # for other writers: a file whose presence marks a checkpoint complete
    algo: str = "sha256"  # hash for manifests built at sync time (sha256: SHA-NI, fastest measured)
    budget: float = num(60.0, 0, DAY, lo_open=True)  # seconds the epilog may spend; keep below EpilogMsgTime
    background: bool = True  # finish what the budget left over in a detached background sync
    # drain the node when its destination stops answering (the sync child stuck in the kernel past the budget); off:
    # a storage hang is not the node's fault, the epilog defers the copy to the background sync and the node stays up
    drain_on_hang: bool = False
    job_file: str = ".slurmkit-sync.yaml"  # a job's narrowing file in its source dir (read as the job's user)
    workers: int = num(2, 1, 256)  # files copied and hashed in parallel
    s3_endpoint: str | None = None  # S3-compatible endpoint URL (None: AWS)
    s3_region: str = S3_DEFAULT_REGION  # region for s3:// destinations
    s3_part_size: int = num(S3_DEFAULT_PART, S3_MIN_PART, 5 << 30)  # multipart part size in bytes (S3: 5 MiB-5 GiB)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.algo not in HASH_ALGOS:
            raise RangeError("algo", f"expected one of {', '.join(HASH_ALGOS)}, got {self.algo!r}")


@section
class SubmitSettings(Section):
    """`slurmkit submit` / `render`: where templates and node topology profiles live, and the site's defaults."""

    template_dirs: list[str] = field(default_factory=list)  # searched before the built-in templates/sbatch/
    # partition -> `slurmkit topo --json` document of its nodes (path; relative paths are next to this config)
    profiles: dict[str, str] = field(default_factory=dict)
    default_partition: str | None = None  # a job spec without a partition gets this one
    containers: bool = False  # the site runs pyxis/enroot: `container.image` becomes --container-image
    slurmkit_bin: str = "slurmkit"  # how jobs call `slurmkit run` on the compute nodes (absolute path is safest)
    signal_lead: int = num(120, 0, 65535)  # seconds before the time limit Slurm sends USR2 (Slurm's max: 65535)
    max_requeues: int = num(3, 0, 100000)  # requeues `slurmkit run` may do before it lets the job end
    check_cluster: bool = True  # submit asks Slurm whether the partition and the GPUs per node exist


@section
class InstallSettings(Section):
    """`slurmkit install`: where things go on a node, how to reach it. Every target path may contain `{node}`."""

    root: str = ""  # prefix for every target path (tests: /tmp/x/{node})
    hooks_dir: str = "/etc/slurm/slurmkit"  # prolog, epilog and health go here
    config_path: str = "/etc/slurmkit/config.yaml"  # the site config on the node
    venv_dir: str = "/opt/slurmkit/venv"  # a symlink to venv-<bundle>, a venv with slurmkit
    wheel_dir: str = "/opt/slurmkit/wheels"  # the wheels the venv is built from
    stamp_path: str = "/etc/slurmkit/installed.json"  # what is installed (the version stamp)
    # the hook agent's systemd unit (slurmkit/hooks/agent.py: the prolog and epilog run in a child of it, at a
    # fraction of their CPU); "" installs none, and the hooks run in their own processes as before
    agent_unit: str = "/etc/systemd/system/slurmkit-agent.service"
    python: str = "python3"  # the node's Python that creates the venv
    # build the node venv once on this host and ship it as one tarball (unpacked on the node) to every node
    # whose Python matches this one (version, ABI, machine); the others get the wheels and build it themselves
    prebuilt_venv: bool = True
    prolog_src: str | None = None  # local script to install (default: the repo's prolog/prolog)
    epilog_src: str | None = None  # (default: the repo's epilog/epilog)
    health_src: str | None = None  # (default: the repo's health/health, the HealthCheckProgram)
    # HealthCheckInterval= the printed slurm.conf lines ask for, with HealthCheckProgram= the installed health
    # script (seconds; 0: no HealthCheckProgram advice)
    health_check_interval: int = num(300, 0, 86400)
    site_config_src: str | None = None  # local config to push (default: the one slurmkit loaded)
    wheelhouse: str | None = None  # prebuilt wheels (slurmkit + node_packages); default: build
    # what the node venv gets beside slurmkit (at the versions installed on the admin host)
    node_packages: list[str] = field(
        default_factory=lambda: ["click", "PyYAML", "Jinja2", "MarkupSafe", "ClusterShell"]
    )
    parallel: int = num(16, 1, 10000)  # nodes at a time
    connect_timeout: float = num(10.0, 0, 3600, lo_open=True)  # seconds: TCP connect, SSH handshake, auth
    command_timeout: float = num(120.0, 0, DAY, lo_open=True)  # seconds: each remote command and file transfer
    ssh_config: str = "~/.ssh/config"  # OpenSSH client config: HostName, Port, User, IdentityFile...
    known_hosts: str = "~/.ssh/known_hosts"  # host keys install (and the default recheck) trust
    user: str | None = None  # default: SSH config, else the local user
    port: int | None = num(None, 1, 65535)  # default: SSH config, else 22
    identity_file: str | None = None  # in addition to the SSH config's, the agent's and ~/.ssh/id_*
    # what slurm.conf's Prolog= names when it is not the installed hook: a site wrapper (needed when root contains {node})
    slurm_prolog: str | None = None
    slurm_epilog: str | None = None  # the same for Epilog=
    prolog_epilog_timeout: int = num(300, 1, 65535)  # the PrologEpilogTimeout= the printed slurm.conf lines ask
    verify_timeout: float = num(120.0, 0, DAY, lo_open=True)  # seconds for `slurmkit check --json` on a node

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("root", "hooks_dir", "config_path", "venv_dir", "wheel_dir", "stamp_path"):
            v = getattr(self, name)
            if "\n" in v or "\0" in v:
                raise ValueError(f"{name}: a path cannot contain a newline")
            if name != "root" and not v.startswith("/"):
                raise ValueError(f"{name}: expected an absolute path, got {v!r}")


@section
class AuditSettings(Section):
    """`slurmkit audit`: what a drained GPU costs, how to re-run a check on a node, where node logs live."""

    price_per_gpu_hour: float = num(0.0, 0, 1e6)  # currency units per GPU-hour; 0 = show GPU-hours only
    # argv that runs ONE check on a node and prints `slurmkit check --json` output. Substituted anywhere inside
    # an argument (never a shell string): {node}, {check}, and what install put on the node: {slurmkit} (its
    # venv's slurmkit), {config} (its site config); install's SSH files {ssh_config} and {known_hosts}
    recheck_command: list[str] = field(
        default_factory=lambda: [
            "ssh",
            "-F",
            "{ssh_config}",
            "-o",
            "UserKnownHostsFile={known_hosts}",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "{node}",
            "{slurmkit}",
            "--config",
            "{config}",
            "check",
            "--json",
            "--node",
            "{node}",
            "--only",
            "{check}",
        ]
    )
    recheck_timeout: float = num(120.0, 0, DAY, lo_open=True)  # seconds for one recheck_command
    # argv that prints a node's own health log (JSON lines) when the shared log has no record for a drain;
    # {node} and {path} (paths.health_log) are filled in; empty = only read the shared log
    node_log_command: list[str] = field(default_factory=list)
    node_log_timeout: float = num(20.0, 0, DAY, lo_open=True)  # seconds for one node_log_command
    evidence_per_node: int = num(3, 0, 1000)  # newest matching health-log records shown per node
    evidence_window_minutes: int = num(30, 0, 10080)  # a Slurm "Prolog error" matches records this close to it
    causes_file: str | None = None  # a site's own cause table (default: slurmkit/data/audit_causes.yaml)


@section
class GpuCountSettings(Section):
    """The gpu_count check: how many GPUs a node must show."""

    expected: int | None = num(None, 0, 4096)  # GPUs every node must show; None: the node's gres count
    per_node: dict[str, int] = num(default_factory=dict, lo=0, hi=4096)  # hostlist -> count (wins)


@section
class EccSettings(Section):
    """The ecc check's thresholds."""

    volatile_uncorrectable_max: int = num(0, 0, 10**9)  # more volatile uncorrectable errors than this: fail
    aggregate_sram_uncorrectable_max: int = num(4, 0, 10**9)  # lifetime SRAM uncorrectable above this: fail
    fail_on_remap_pending: bool = True  # row remapping pending = needs a GPU reset
    fail_on_retired_pending: bool = True  # pending page blacklist (pre-A100) = needs a GPU reset
    require_ecc_enabled: bool = False  # ECC mode Disabled is a failure (Unknown Error always is)


@section
class XidSettings(Section):
    """The xid check: which kernel-log Xid codes are acted on."""

    fatal_extra: list[int] = num(default_factory=list, lo=0, hi=10**6)  # codes fatal beyond the catalog
    ignore: list[int] = num(default_factory=list, lo=0, hi=10**6)  # codes never to act on
    unknown_status: Literal["ok", "warn", "fail"] = "warn"  # a code the catalog does not know
    # the kernel's boot id, to tell a new boot ({node}: the node's name; the dev cluster's fake nodes have one each)
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    # read this kernel log file (kern.log, messages) from where the last hook stopped, instead of running `dmesg`
    # (which reads the whole ring buffer)
    log_file: str | None = None
    userspace: Literal["ok", "warn", "fail"] = "warn"  # a GPU fault in a line userspace wrote (not `kernel:`)
    ignore_signatures: list[str] = field(default_factory=list)  # kernel-log signature ids never to act on
    # a site's own signatures: {id, match (regex), status, code (xid...), says, todo} (slurmkit/data/kernlog_signatures.json).
    # Only log lines holding a fixed string of some pattern are parsed; a `match` with no fixed string of 3+
    # characters (or with `(?i)`) makes every line parsed (slower on big logs)
    signatures_extra: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.signatures_extra:  # only then: the kernel-log package costs every CLI (submit, sync) ~15 ms to import
            from .health.kernlog.signatures import validate_extra

            validate_extra(self.signatures_extra)


@section
class DriverSettings(Section):
    """The driver check: allowed driver and CUDA versions."""

    driver_versions: list[str] = field(default_factory=list)  # allowed driver versions ("550.54.15"); empty: any
    cuda_versions: list[str] = field(default_factory=list)  # allowed CUDA versions ("12.4"); empty: any


@section
class PcieSettings(Section):
    """The pcie check: link width and generation."""

    min_width: int | None = num(None, 1, 64)  # accept links at least this wide (else: width must equal its max)
    min_gen: int | None = num(None, 1, 16)  # the link's max generation must reach this (current drops idle)
    status: Literal["warn", "fail"] = "fail"  # how a PCIe link finding counts


@section
class NvlinkSettings(Section):
    """The nvlink check."""

    status: Literal["warn", "fail"] = "fail"  # how an NVLink finding counts
    error_threshold: int = num(1000, 0, 10**15)  # an NVLink error counter above this is a finding


@section
class GpuProcsSettings(Section):
    """The gpu_procs check: processes and memory left on a job's GPUs."""

    grace_seconds: float = num(5.0, 0, 3600)  # epilog: wait this long for the job's processes to leave the GPUs
    max_memory_mib: int = num(1024, 0, 10**7)  # memory used on a job GPU with no process: above is a leftover


@section
class NcclSettings(Section):
    """The nccl check: all_reduce_perf bus bandwidth against the expected figure."""

    expected_busbw_gbps: float | None = num(None, 0, 1e5, lo_open=True)  # expected "Avg bus bandwidth"
    profiles: dict[str, float] = num(default_factory=dict, lo=0, hi=1e5, lo_open=True)  # hostlist -> busbw
    min_ratio: float = num(0.8, 0, 1, lo_open=True)  # fail below min_ratio * expected
    ttl_seconds: int = num(86400, 0, 10**8)  # the prolog trusts a cached result this long
    # all_reduce_perf's arguments (8 B to 1 GiB, factor 2, 8 GPUs)
    args: list[str] = field(default_factory=lambda: ["-b", "8", "-e", "1G", "-f", "2", "-g", "8"])
    timeout: float = num(300.0, 0, DAY, lo_open=True)  # seconds for all_reduce_perf


# the Xid catalog's actions a reboot can fix (slurmkit/data/xid_catalog.json)
REMEDIABLE = ("RESET_GPU", "RESTART_BM")


@section
class HealthSettings(Section):
    """Which checks each hook runs, and how long they may take."""

    # profile -> the checks it runs, in order (prolog/epilog: the hooks; full: `slurmkit check`)
    profiles: dict[str, list[str]] = field(
        default_factory=lambda: {
            "prolog": ["xid", "gpu_count", "ecc", "recovery", "driver", "pcie", "gpu_procs", "nccl", "dcgm"],
            "epilog": ["xid", "ecc", "gpu_procs"],
            "full": ["xid", "gpu_count", "ecc", "recovery", "driver", "pcie", "nvlink", "gpu_procs", "nccl"],
            # HealthCheckProgram (slurmkit health): on a node with a job only the checks that cannot disturb it run;
            # nccl and dcgm read their cached verdicts (the heavy runs are sweep jobs)
            "health": ["xid", "gpu_count", "ecc", "recovery", "driver", "pcie", "nvlink", "gpu_procs", "nccl", "dcgm"],
        }
    )
    command_timeout: float = num(10.0, 0, 3600, lo_open=True)  # seconds for each nvidia-smi / dmesg call
    budget_seconds: float = num(30.0, 0, DAY, lo_open=True)  # a profile stops starting checks after this long
    fail_closed: bool = True  # a check that cannot run (timeout, missing tool) fails (else: warn)
    drain: bool = True  # prolog/epilog drain the node on a failure
    periodic_budget_seconds: float = num(45.0, 1, 3600)  # a health run stops starting checks after this (Slurm: 60 s)
    log_max_bytes: int = num(16 << 20, 4096, 1 << 40)  # a node's health-log file is rotated past this size
    log_generations: int = num(5, 0, 1000)  # rotated files kept per node (<node>.jsonl.1 .. .N)
    syslog: bool = False  # also send every record to journald (SLURMKIT_* fields) or syslog
    textfile_dir: str | None = None  # node_exporter textfile collector dir: slurmkit-<node>.prom written there
    # `slurmkit health --sweep`: the heavy checks as one exclusive, low-priority job per node
    sweep_partition: str | None = None  # the partition of the sweep jobs (default: the swept one)
    sweep_qos: str | None = None  # the QOS of the sweep jobs (default: none given)
    sweep_time_limit: str = "00:30:00"  # time limit of a sweep job
    sweep_nice: int = num(10000, 0, 2147483645)  # sbatch --nice of a sweep job: behind every user job
    # remediation (opt-in): a health run reboots an idle node slurmkit drained for a cause a reboot fixes
    # (`scontrol reboot ASAP nextstate=RESUME`; needs RebootProgram and ResumeTimeout in slurm.conf)
    remediate: bool = False  # reboot idle nodes slurmkit drained for a cause in remediate_actions
    remediate_actions: list[str] = field(default_factory=lambda: ["RESET_GPU", "RESTART_BM"])  # causes' actions
    remediate_flap_limit: int = num(3, 1, 100)  # after this many reboots of a node in the window: a human's
    remediate_flap_window_hours: float = num(24.0, 0.01, 24 * 365)  # the window the flap limit counts in

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = sorted(set(self.remediate_actions) - set(REMEDIABLE))
        if bad:
            raise ValueError(
                f"remediate_actions: {', '.join(bad)} cannot be remediated by a reboot "
                f"(expected some of {', '.join(REMEDIABLE)})"
            )


@section
class DcgmSettings(Section):
    """The dcgm check: DCGM's diagnostic, run by name or by a health sweep; the prolog reads its cached verdict."""

    level: int = num(1, 1, 4)  # dcgmi diag -r LEVEL: 1 ~10 s, 2 ~2 min, 3 ~15 min
    timeout: float = num(600.0, 1, DAY)  # seconds before a hung dcgmi is a finding
    ttl_seconds: int = num(86400, 0, 30 * DAY)  # the prolog trusts a cached verdict this long


@section
class EfficiencySettings(Section):
    """Per-job GPU efficiency (slurmkit/efficiency): the sampler the prolog starts and the verdicts' thresholds."""

    enabled: bool = True  # the prolog starts a sampler for every job that holds GPUs
    interval: float = num(10.0, 0.05, 3600)  # seconds between samples
    backend: Literal["auto", "nvml", "nvidia-smi"] = "auto"  # auto: NVML (nvidia-ml-py) when it imports
    min_samples: int = num(3, 1, 100000)  # fewer readable samples: unknown
    idle_util_pct: float = num(5.0, 0, 100)  # a sample at or below this utilisation is idle ...
    idle_fraction: float = num(0.9, 0.01, 1)  # ... and a GPU idle in this share of its samples is idle
    underused_util_pct: float = num(30.0, 0, 100)  # mean utilisation under this: underused
    hung_util_pct: float = num(90.0, 1, 100)  # hung: utilisation at or above this ...
    hung_power_ratio: float = num(0.35, 0.01, 1)  # ... while power is under this share of the board's limit ...
    hung_seconds: float = num(300.0, 0.1, DAY)  # ... for this long in a row
    held_memory_mib: float = num(1024.0, 0, 1 << 24)  # an idle GPU holding more than this is "memory held"
    profiling: bool = True  # also run `dcgmi dmon -e 1002,1004,1005` (SM/tensor/DRAM activity) where it works
    dcgm_start_timeout: float = num(30.0, 1, 3600)  # seconds for dcgmi's first sample; past it: no profiling fields
    sm_busy_util_pct: float = num(80.0, 1, 100)  # "busy running little": utilisation mean at or above this ...
    sm_low_active_pct: float = num(20.0, 0, 100)  # ... while DCGM's SM activity mean is under this (a finding)
    samples_max_bytes: int = num(4 << 20, 64 << 10, 1 << 30)  # a job's sample file; past it, half resolution
    log_max_bytes: int = num(64 << 20, 1 << 20, 1 << 40)  # the job-efficiency log; past it, it rotates to .1
    log: str | None = None  # default: beside paths.health_log, in its layout (efficiency/ or .jsonl)
    watchdog_interval: float = num(5.0, 0.1, 3600)  # seconds between the sampler's "is my job still here?" checks
    start_grace: float = num(120.0, 1, DAY)  # a job whose steps never appear in this long is gone
    steps_dir: str = "/tmp"  # where report_step() leaves a job's FLOPs (slurmkit-steps.<job id>) for MFU
    # `report idle --run-command`: argv run once per wasteful job; {job_id} {user} {account} {partition} {node}
    # {verdict} {gpu_hours} {wasted_gpu_hours} fill in, each one argument (never a shell string). Empty: nothing sent
    idle_command: list[str] = field(default_factory=list)
    idle_command_timeout: float = num(30.0, 0, DAY, lo_open=True)  # seconds for one idle_command

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.idle_util_pct >= self.underused_util_pct and self.underused_util_pct > 0:
            raise ValueError("idle_util_pct must be below underused_util_pct")


@section
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
    dcgm: DcgmSettings = field(default_factory=DcgmSettings)
    efficiency: EfficiencySettings = field(default_factory=EfficiencySettings)
    # where the settings came from, and the line of each key ("slurm.timeout" -> 3), for messages
    source: str | None = field(default=None, metadata={"internal": True})
    lines: dict[str, int] = field(default_factory=dict, metadata={"internal": True})


SECTIONS: dict[str, type] = {
    f.name: f.default_factory  # type: ignore[misc]
    for f in dataclasses.fields(Settings)  # type: ignore[arg-type]
    if not f.metadata.get("internal")
}


def to_dict(s: Settings) -> dict[str, dict[str, Any]]:
    """The settings as plain JSON-able data (sections only), the inverse of from_dict."""
    return {name: dataclasses.asdict(getattr(s, name)) for name in SECTIONS}


def from_dict(
    data: dict[str, dict[str, Any]], *, source: str | None = None, lines: dict[str, int] | None = None
) -> Settings:
    """Settings rebuilt from to_dict() data: the real dataclasses, ranges checked again. A key the schema does
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
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore
            rng = f.metadata.get("range")
            out.append(
                (f"{name}.{f.name}", str(hints[f.name]).replace("typing.", ""), repr(default), str(rng) if rng else "")
            )
    return out
