"""The sections of the health checks (one per check), the health profiles and the efficiency sampler."""

from __future__ import annotations

import re
from ..record import field
from typing import Literal

from ..health.checks.registry import default_profiles
from .fields import DAY, Section, num


class GpuCountSettings(Section):
    """The gpu_count check: how many GPUs a node must show."""

    expected: int | None = num(None, 0, 4096)  # GPUs every node must show; None: the node's gres count
    per_node: dict[str, int] = num(default_factory=dict, lo=0, hi=4096)  # hostlist -> count (wins)


class EccSettings(Section):
    """The ecc check's thresholds."""

    volatile_uncorrectable_max: int = num(0, 0, 10**9)  # more volatile uncorrectable errors than this: fail
    aggregate_sram_uncorrectable_max: int = num(4, 0, 10**9)  # lifetime SRAM uncorrectable above this: fail
    fail_on_remap_pending: bool = True  # row remapping pending = needs a GPU reset
    fail_on_retired_pending: bool = True  # pending page blacklist (pre-A100) = needs a GPU reset
    require_ecc_enabled: bool = False  # ECC mode Disabled is a failure (Unknown Error always is)


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
            from ..health.kernlog.signatures import validate_extra

            validate_extra(self.signatures_extra)


class DriverSettings(Section):
    """The driver check: allowed driver and CUDA versions."""

    driver_versions: list[str] = field(default_factory=list)  # allowed driver versions ("550.54.15"); empty: any
    cuda_versions: list[str] = field(default_factory=list)  # allowed CUDA versions ("12.4"); empty: any


class PcieSettings(Section):
    """The pcie check: link width and generation."""

    min_width: int | None = num(None, 1, 64)  # accept links at least this wide (else: width must equal its max)
    min_gen: int | None = num(None, 1, 16)  # the link's max generation must reach this (current drops idle)
    status: Literal["warn", "fail"] = "fail"  # how a PCIe link finding counts


# the clock event reasons nvidia-smi names (--query-gpu clocks_event_reasons.<name>)
ClockReason = Literal[
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sw_power_cap",
    "gpu_idle",
    "applications_clocks_setting",
    "sync_boost",
    "display_clock_setting",
]


class ClocksSettings(Section):
    """The clocks check: which clock event reasons (nvidia-smi's, by their --query-gpu names) fail or warn."""

    # the hardware's own slowdowns fail; the reasons a GPU slows on purpose (gpu_idle, sw_power_cap,
    # applications_clocks_setting, sync_boost, display_clock_setting) are never findings unless listed here
    fail_on: list[ClockReason] = field(
        default_factory=lambda: ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    )
    # the reasons that warn (never drain): by default the driver's own thermal limit, reached before the hardware's
    warn_on: list[ClockReason] = field(default_factory=lambda: ["sw_thermal_slowdown"])


# the conditions of a GPU's NVLink fabric the fabric check names (health/checks/fabric.py CONDITIONS)
FabricCondition = Literal[
    "not_ready",
    "status_error",
    "unhealthy",
    "route_unhealthy",
    "incorrect_configuration",
    "clique_mismatch",
    "clique_missing",
    "limited_capacity",
    "bandwidth_degraded",
    "route_recovery",
    "access_timeout_recovery",
]


class FabricSettings(Section):
    """The fabric check: which conditions of a GPU's NVLink fabric (nvidia-smi -q "Fabric") fail or warn."""

    # a fabric not trained (State not Completed), an error Status, an Unhealthy summary or route, a wrong
    # configuration, and GPUs of one node in different cliques fail
    fail_on: list[FabricCondition] = field(
        default_factory=lambda: [
            "not_ready",
            "status_error",
            "unhealthy",
            "route_unhealthy",
            "incorrect_configuration",
            "clique_mismatch",
        ]
    )
    # what the fabric is recovering from, or runs with less bandwidth for; clique_missing (a GPU in no clique: normal
    # on one HGX node, a fault on an NVL rack) is in neither list until a site adds it
    warn_on: list[FabricCondition] = field(
        default_factory=lambda: ["limited_capacity", "bandwidth_degraded", "route_recovery", "access_timeout_recovery"]
    )


# the conditions of a node's InfiniBand ports the ib check names (health/checks/ib.py CONDITIONS)
IbCondition = Literal[
    "missing",
    "down",
    "not_active",
    "rate_low",
    "width_low",
    "too_few_active",
    "link_downed",
    "below_peers",
    "no_port_up",
    "symbol_errors",
]
_IB_PORT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(?::\d{1,4})?")


class IbSettings(Section):
    """The ib check: which InfiniBand ports (ibstat) a node must have up, at what rate. A node with ib.required or
    ib.min_active has InfiniBand: there no ibstat, or ibstat hung or listing no HCA, is a finding; elsewhere a node
    without ibstat or without an HCA is a skip."""

    # HCA ports that must be Active and LinkUp: "mlx5_0" (each of its ports) or "mlx5_0:1" (NCCL_IB_HCA's spelling);
    # a port not listed that is Down/Polling is an empty port, not a fault
    required: list[str] = field(default_factory=list)
    min_active: int = num(0, 0, 4096)  # at least this many InfiniBand ports Active/LinkUp (0: not counted)
    # an up port below this rate (Gb/s as ibstat's Rate counts it: 4x EDR 100, 4x HDR 200, 4x NDR 400) fails
    min_rate: float | None = num(None, 0, 1e5, lo_open=True)
    # an up port narrower than this many lanes (4 for 4x) fails: a fabric capture prints the width, ibstat does not
    # (its Rate counts the lanes: a 1x link of a 4x port reads a quarter of min_rate)
    min_width: int | None = num(None, 1, 64)
    # a required port absent or down, a port LinkUp but not Active (no subnet manager configured it), a rate or
    # width under the minimum, fewer Active ports than min_active, a link that went down since the last run fail
    fail_on: list[IbCondition] = field(
        default_factory=lambda: [
            "missing",
            "down",
            "not_active",
            "rate_low",
            "width_low",
            "too_few_active",
            "link_downed",
        ]
    )
    # a port slower than the node's (or, in a fabric capture, the fabric's) other host ports warns until a site with
    # one kind of port per node moves it to fail_on (a node may mix 400 Gb/s compute and 200 Gb/s storage HCAs);
    # HCAs present with no port up and none required warn, as do symbol errors growing
    warn_on: list[IbCondition] = field(default_factory=lambda: ["below_peers", "no_port_up", "symbol_errors"])
    # follow each Active port's error counters (perfquery -C HCA -P PORT, as root) from one live run to the next
    # (<state_dir>/ib-<node>.json, moved by the hooks once they acted): off by default, one perfquery per port
    counters: bool = False
    link_downed_max: int = num(0, 0, 255)  # LinkDownedCounter growth above this since the last run: a flap (fails)
    symbol_error_max: int = num(10, 0, 65535)  # SymbolErrorCounter growth above this since the last run (warns)

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [p for p in self.required if not isinstance(p, str) or not _IB_PORT.fullmatch(p)]
        if bad:
            raise ValueError(
                f"required: {', '.join(repr(b) for b in bad[:3])} is not an HCA port (expected a name such as "
                f"mlx5_0, or mlx5_0:1 for one port)"
            )

    def expects_ib(self) -> bool:
        """The site says this node has InfiniBand."""
        return bool(self.required) or self.min_active > 0


class TemperatureSettings(Section):
    """The temperature check: the site's own limits, beside the slowdown and max operating points each GPU prints."""

    gpu_max_c: float | None = num(None, 0, 150)  # a GPU hotter than this fails (None: only the GPU's own points)
    memory_max_c: float | None = num(None, 0, 150)  # GPU memory (HBM) hotter than this fails


class VbiosSettings(Section):
    """The vbios check: one VBIOS across a node's GPUs of one model, and the versions the site pins."""

    # GPU model (nvidia-smi's Product Name: "NVIDIA H100 80GB HBM3") or "*" -> allowed VBIOS versions; empty: any
    versions: dict[str, list[str]] = field(default_factory=dict)
    mismatch: Literal["warn", "fail"] = "warn"  # GPUs of one model on one node running different VBIOS versions


class GpuConfigSettings(Section):
    """The gpu_config check: persistence mode and application clocks as the site wants them."""

    persistence: Literal["enabled", "disabled", "any"] = "enabled"  # the persistence mode every GPU must be in
    app_clocks: Literal["default", "any"] = "default"  # default: application clocks must be the card's defaults
    app_graphics_mhz: int | None = num(None, 1, 10000)  # pinned application graphics clock (instead of the default)
    app_memory_mhz: int | None = num(None, 1, 100000)  # pinned application memory clock
    status: Literal["warn", "fail"] = "warn"  # how a finding counts (the GPU works: warn by default)


class DstateSettings(Section):
    """The dstate check: processes stuck in D state holding a GPU device open."""

    proc: str = "/proc"  # the proc filesystem to read (a containerised agent may see the host's elsewhere)
    devices: list[str] = field(default_factory=lambda: ["/dev/nvidia"])  # path prefixes of the GPU devices
    confirm_seconds: float = num(2.0, 0, 60)  # a process must still be in D state this long after it was seen


class NvlinkSettings(Section):
    """The nvlink check."""

    status: Literal["warn", "fail"] = "fail"  # how an NVLink finding counts
    error_threshold: int = num(1000, 0, 10**15)  # an NVLink error counter above this is a finding
    # GPU model (as `nvidia-smi nvlink -s` names it: "NVIDIA H100 PCIe") or "*" (every GPU: a node class, through
    # overrides:) -> how many links each GPU lists inactive by design; more inactive links than that are a finding
    inactive_by_design: dict[str, int] = num(default_factory=dict, lo=0, hi=64)


class GpuProcsSettings(Section):
    """The gpu_procs check: processes and memory left on a job's GPUs."""

    grace_seconds: float = num(5.0, 0, 3600)  # epilog: wait this long for the job's processes to leave the GPUs
    max_memory_mib: int = num(1024, 0, 10**7)  # memory used on a job GPU with no process: above is a leftover


class NcclSettings(Section):
    """The nccl check: all_reduce_perf bus bandwidth against the expected figure."""

    expected_busbw_gbps: float | None = num(None, 0, 1e5, lo_open=True)  # expected "Avg bus bandwidth"
    profiles: dict[str, float] = num(default_factory=dict, lo=0, hi=1e5, lo_open=True)  # hostlist -> busbw
    min_ratio: float = num(0.8, 0, 1, lo_open=True)  # fail below min_ratio * expected
    # what all_reduce_perf between two nodes should reach (GB/s) in `health --sweep ... --checks nccl-pairs`;
    # unset: each pair is judged against the best pair of the sweep (min_ratio of it)
    pairs_expected_busbw_gbps: float | None = num(None, 0, 1e5, lo_open=True)
    ttl_seconds: int = num(86400, 0, 10**8)  # the prolog trusts a cached result this long
    # all_reduce_perf's arguments (8 B to 1 GiB, factor 2, 8 GPUs)
    args: list[str] = field(default_factory=lambda: ["-b", "8", "-e", "1G", "-f", "2", "-g", "8"])
    timeout: float = num(300.0, 0, DAY, lo_open=True)  # seconds for all_reduce_perf


# the Xid catalog's actions a reboot can fix (slurmkit/data/xid_catalog.json)
REMEDIABLE = ("RESET_GPU", "RESTART_BM")


class HealthSettings(Section):
    """Which checks each hook runs, and how long they may take."""

    # profile -> the checks it runs, in order (prolog/epilog: the hooks; full: `slurmkit check`; health:
    # HealthCheckProgram, which on a node with a job runs only the checks that cannot disturb it, and where nccl and
    # dcgm read their cached verdicts); the defaults come from the check registry (slurmkit/health/checks/registry.py)
    profiles: dict[str, list[str]] = field(default_factory=default_profiles)
    command_timeout: float = num(10.0, 0, 3600, lo_open=True)  # seconds for each nvidia-smi / dmesg call
    # where the GPU checks read the GPUs: auto = NVML in process (nvidia-ml-py over libnvidia-ml) where it loads,
    # else nvidia-smi -q (the fallback and its reason go to the health log); nvml = NVML only (a check fails where
    # it cannot load); nvidia-smi = always the command (a site whose nvidia-smi is a wrapper)
    gpu_source: Literal["auto", "nvml", "nvidia-smi"] = "auto"
    budget_seconds: float = num(30.0, 0, DAY, lo_open=True)  # a profile stops starting checks after this long
    fail_closed: bool = True  # a check that cannot run (timeout, missing tool) fails (else: warn)
    drain: bool = True  # prolog/epilog drain the node on a failure
    periodic_budget_seconds: float = num(45.0, 1, 3600)  # a health run stops starting checks after this (Slurm: 60 s)
    log_max_bytes: int = num(16 << 20, 4096, 1 << 40)  # a health-log file (a node's, or the one file) rotates past it
    log_generations: int = num(5, 0, 1000)  # rotated files kept per file (<node>.jsonl.1 .. .N)
    syslog: bool = False  # also send every record to journald (SLURMKIT_* fields) or syslog
    textfile_dir: str | None = None  # node_exporter textfile collector dir: slurmkit-<node>.prom written there
    # `slurmkit health --sweep`: the heavy checks as one exclusive, low-priority job per node
    sweep_partition: str | None = None  # the partition of the sweep jobs (default: the swept one)
    sweep_qos: str | None = None  # the QOS of the sweep jobs (default: none given)
    sweep_time_limit: str = "00:30:00"  # time limit of a sweep job
    sweep_nice: int = num(10000, 0, 2147483645)  # sbatch --nice of a sweep job: behind every user job
    # remediation (opt-in): a health run reboots an idle node slurmkit drained for a cause a reboot fixes
    # (`scontrol reboot`: the node stays drained until a recheck on the new boot passes, then slurmkit resumes it;
    # needs RebootProgram and ResumeTimeout in slurm.conf)
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


class DcgmSettings(Section):
    """The dcgm check: DCGM's diagnostic, run by name or by a health sweep; the prolog reads its cached verdict."""

    level: int = num(1, 1, 4)  # dcgmi diag -r LEVEL: 1 ~10 s, 2 ~2 min, 3 ~15 min
    timeout: float = num(600.0, 1, DAY)  # seconds before a hung dcgmi is a finding
    ttl_seconds: int = num(86400, 0, 30 * DAY)  # the prolog trusts a cached verdict this long


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
    # a node of a multi-node job whose GPUs' median SM clock, activity or power is this many percent under the
    # median of the job's other nodes is named a straggler (`efficiency JOBID`)
    straggler_margin_pct: float = num(20.0, 1, 95)
    # the node's own verdict (the `straggler` check, in its epilog and health program): a warn for each job it lags
    # in; the lag that makes this many within straggler_window_hours (counted since its last straggler drain) is a
    # fail, and the node is drained `slurmkit:straggler` for a human. 0: named and logged, never drained
    straggler_drain_after: int = num(0, 0, 1000)
    straggler_window_hours: float = num(24.0, 0.01, 24 * 365)  # the window straggler_drain_after counts in
    # a job whose other nodes' records were not in at this node's epilog is judged by the health program, up to
    # this long after it ended; past it, it is left unjudged (said in the health log)
    straggler_wait_minutes: float = num(60.0, 1, 24 * 60)
    # how long the epilog waits for the job's other nodes' records before leaving the job to the health program
    straggler_epilog_wait: float = num(10.0, 0, 60)
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


class IdlePolicySettings(Section):
    """The idle policy (opt-in): the sampler beside a running job notices when ALL of the job's GPUs stayed idle
    for notice_after seconds (a line in the job's output, the site's notice_command), and after action_after
    seconds cancels or requeues the job. Every step is a health-log record and shows in `slurmkit report idle`."""

    enabled: bool = False  # off by default: nothing is noticed, cancelled or requeued until a site turns it on
    util_pct: float = num(5.0, 0, 100)  # a GPU sample at or under this utilisation is idle (no reading: not idle)
    notice_after: float = num(1800.0, 1, 30 * DAY)  # seconds every GPU of the job stayed idle before the notice
    action_after: float = num(3600.0, 1, 30 * DAY)  # seconds every GPU stayed idle before the action
    action: Literal["cancel", "requeue", "none"] = "cancel"  # scancel, scontrol requeue, or the notice alone
    # requeue: a job Slurm has restarted this many times (its Restarts) is cancelled instead, so an idle job that
    # comes back idle is not requeued forever
    requeue_limit: int = num(1, 0, 1000)
    notice_job_output: bool = True  # append the notice to the job's stdout file, as the job's user, no links
    # argv run once per notice (never a shell string); {job_id} {user} {account} {partition} {node}
    # {idle_seconds} {action} {action_after} fill in, each one argument. Empty: no command
    notice_command: list[str] = field(default_factory=list)
    command_timeout: float = num(30.0, 0, 3600, lo_open=True)  # seconds for notice_command and each Slurm call
    exempt_accounts: list[str] = field(default_factory=list)  # jobs of these accounts are never noticed or acted on
    exempt_partitions: list[str] = field(default_factory=list)  # nor jobs of these partitions
    exempt_users: list[str] = field(default_factory=list)  # nor jobs of these users

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.action != "none" and self.notice_after > self.action_after:
            raise ValueError("notice_after must not be above action_after (the notice comes first)")
