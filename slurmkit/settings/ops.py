"""The sections of the operations: how slurmkit calls Slurm, where its tools and state are, how it drains, runs a
job, syncs checkpoints, submits, installs and audits."""

from __future__ import annotations

from ..record import field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Literal

from .fields import DAY, TRIGGER_FORBIDDEN, RangeError, Section, _check_signal, num


class SlurmSettings(Section):
    """How slurmkit calls Slurm."""

    backend: Literal["auto", "cli", "pyslurm"] = "auto"  # auto: pyslurm only where it matches the Slurm version
    timeout: float = num(10.0, 0, 3600, lo_open=True)  # seconds for every call to a Slurm command
    bin_dir: str | None = None  # where sbatch/scontrol/sinfo live when they are not on PATH


class ToolsSettings(Section):
    """The node tools the checks run: a path (absolute recommended: prolog/epilog get no PATH), or an argv list
    the tool's own arguments are appended to, e.g. [env, SLURMKIT_FAKEGPU_SCENARIO=/x, /opt/fake/nvidia-smi]."""

    nvidia_smi: str | list[str] = "nvidia-smi"  # GPU state (-q), topology (topo -m), NVLink (nvlink -s/-e)
    dmesg: str | list[str] = "dmesg"  # the kernel log the xid check reads (see xid.log_file)
    all_reduce_perf: str | list[str] = "all_reduce_perf"  # nccl-tests, for the nccl check (args: nccl.args)
    dcgmi: str | list[str] = "dcgmi"  # NVIDIA DCGM's CLI, for the dcgm check (dcgmi diag)
    ibstat: str | list[str] = "ibstat"  # infiniband-diags' ibstat, for the ib check (the node's HCA ports)
    perfquery: str | list[str] = "perfquery"  # infiniband-diags' perfquery, for the ib check's counters (ib.counters)


class PathsSettings(Section):
    """Where slurmkit keeps its state and its health log on a node."""

    state_dir: str = "/var/lib/slurmkit"  # per-node marks: Xid lines seen, the cached NCCL result
    # one JSON line per check run; audit reads its evidence. A directory: one file per node (<node>.jsonl, each
    # written only by its node: safe on NFS, rotated by size); a path ending in .jsonl/.json/.log: one shared file
    health_log: str = "/var/log/slurmkit/health/"


class DrainSettings(Section):
    """The drain etiquette: the prefix that marks a reason as slurmkit's."""

    prefix: str = "slurmkit:"  # every reason slurmkit writes starts with this; the only reasons it may undo


class RunSettings(Section):
    """`slurmkit run`, the job wrapper. Submit with `--signal=B:USR2@LEAD` where LEAD > grace + 30 s."""

    signal: str = "USR2"  # what Slurm sends before the time limit / at preemption: checkpoint + requeue
    checkpoint_signal: str = "TERM"  # what the child gets when asked to checkpoint; "none": only the flag file
    grace: float = num(60.0, 0, DAY)  # seconds the child gets to checkpoint and exit before the requeue
    max_requeues: int = num(10, 0, 100000)  # requeue only while SLURM_RESTART_COUNT is below this
    # which notices make `slurmkit run` checkpoint and requeue the job
    # (node-fault: the command failed and this node's fault checks found a fatal Xid or a lost GPU since the prolog)
    requeue_on: list[Literal["timeout", "preemption", "spot", "node-fault"]] = field(
        default_factory=lambda: ["timeout", "preemption", "spot", "node-fault"]
    )
    timeout_window: float = num(600.0, 0, 30 * DAY)  # signal with less than this left (or past 80%): a timeout
    master_port: int | None = num(None, 1, 65535)  # MASTER_PORT for multi-node jobs; null: 20000 + job id % 20000
    imds_endpoint: str | None = None  # e.g. http://169.254.169.254 to watch for AWS spot interruption notices
    imds_poll_interval: float = num(5.0, 0, 3600, lo_open=True)  # seconds between polls of spot/instance-action
    imds_timeout: float = num(2.0, 0, 600, lo_open=True)  # seconds for each IMDS request
    spot_margin: float = num(15.0, 0, 3600)  # after a spot notice, requeue this long before the announced time
    # after a requeue, the job may start again this many seconds after the wrapper ends (scontrol update
    # StartTime=now+N; more than the epilog takes); 0 keeps Slurm's own hold (the credential lifetime, ~121 s)
    restart_delay: int = num(5, 0, 3600)
    # where `slurmkit run` replicates each complete checkpoint during the job (a path or s3://); null: only the
    # epilog's sync copies them. The spec's checkpoint.durable, or --durable, sets it per job
    durable: str | None = None
    replicate_interval: float = num(2.0, 0.1, 3600)  # seconds between looks for a new complete checkpoint
    replicate_bwlimit: float = num(0.0, 0, 1 << 20)  # MiB/s one replication may use; 0: no limit
    replicate_nice: int = num(10, 0, 19)  # CPU niceness of the copy process (training keeps the CPUs)
    replicate_timeout: float = num(600.0, 1, DAY)  # seconds one copy (or the restore) may take before it is left
    durable_keep: int = num(3, 1, 100000)  # newest checkpoints of the job kept at the durable destination

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_signal(self.signal, "signal")
        if self.signal.strip().upper().removeprefix("SIG") in TRIGGER_FORBIDDEN:
            raise ValueError(
                f"signal: {self.signal} cannot be the trigger (scancel and the time limit send TERM, "
                "and a cancelled job must never requeue); use USR2"
            )
        _check_signal(self.checkpoint_signal, "checkpoint_signal", allow_none=True)
        if 0 < self.restart_delay < 2:
            raise ValueError(
                "restart_delay: 0 (Slurm's own hold) or at least 2 seconds (slurmd revokes the old run's "
                "credential by the second and refuses a restart within it)"
            )


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
    # a multi-node job asks Slurm to keep it under one leaf switch (topology/tree: --switches=1@WAIT) or inside one
    # NVLink block (topology/block: --segment=N) when it fits; submit and render then ask `scontrol show topology`
    # once (docs/fabric.md#placing-a-job); a spec opts out with `placement: false`
    placement: bool = False
    # seconds a job may wait for one leaf switch before Slurm runs it across switches (--switches=1@WAIT); Slurm
    # caps it at SchedulerParameters=max_switch_wait (300 s unless set); 0: no @WAIT (Slurm's maximum)
    switch_wait: int = num(300, 0, DAY)


class InstallSettings(Section):
    """`slurmkit install`: where things go on a node, how to reach it. Every target path may contain `{node}`."""

    root: str = ""  # prefix for every target path (tests: /tmp/x/{node})
    hooks_dir: str = "/etc/slurm/slurmkit"  # prolog, epilog and health go here
    config_path: str = "/etc/slurmkit/config.yaml"  # the site config on the node
    venv_dir: str = "/opt/slurmkit/venv"  # a symlink to venv-<bundle>, a venv with slurmkit
    wheel_dir: str = "/opt/slurmkit/wheels"  # the wheels the venv is built from
    stamp_path: str = "/etc/slurmkit/installed.json"  # what is installed (the version stamp)
    # the hook agent's systemd unit (slurmkit/agent/server.py: the prolog and epilog run in a child of it, at a
    # fraction of their CPU); "" installs none, and the hooks run in their own processes as before
    agent_unit: str = "/etc/systemd/system/slurmkit-agent.service"
    # slurmkit's runtime directory on the node (the agent's socket): `--uninstall`
    # removes it
    run_dir: str = "/run/slurmkit"
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
    # HealthCheckNodeState= the printed lines ask for: ANY (idle and busy nodes; the checks are non-disruptive),
    # CYCLE (spread over the interval instead of every node at once); see docs/health-program.md
    health_check_node_state: str = "ANY,CYCLE"
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
    slurm_health: str | None = None  # the same for HealthCheckProgram= (`--hook-wrapper health`)
    prolog_epilog_timeout: int = num(300, 1, 65535)  # the PrologEpilogTimeout= the printed slurm.conf lines ask
    verify_timeout: float = num(120.0, 0, DAY, lo_open=True)  # seconds for `slurmkit check --json` on a node

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("root", "hooks_dir", "config_path", "venv_dir", "wheel_dir", "stamp_path", "run_dir"):
            v = getattr(self, name)
            if "\n" in v or "\0" in v:
                raise ValueError(f"{name}: a path cannot contain a newline")
            if name != "root" and not v.startswith("/"):
                raise ValueError(f"{name}: expected an absolute path, got {v!r}")


class AgentSettings(Section):
    """The node's hook agent (slurmkit/agent/server.py): the prolog and epilog run in a child of it, at a fraction
    of their CPU; without it they run in their own processes, with the same verdicts. See docs/hooks.md."""

    # `slurmkit install` enables and starts the agent's unit where systemd runs (else it prints how to run it),
    # and the installed hooks look for it; false: no unit is enabled and the installed hooks never try the socket
    enabled: bool = False
    # the agent's socket on a node; {cluster} is slurm.conf's ClusterName there (one socket per cluster on a host
    # that serves several); without a ClusterName, {cluster} and the / before it are dropped
    socket: str = "/run/slurmkit/{cluster}/agent.sock"

    def __post_init__(self) -> None:
        super().__post_init__()
        v = self.socket
        if not v.startswith("/") or any(c in v for c in "\"'$`\\\n\0"):
            raise ValueError(f"socket: expected an absolute path without shell characters, got {v!r}")


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
