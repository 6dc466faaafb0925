"""Every health check, once: its name, the capture it reads first, whether it may run beside a job, the default
profiles that run it, and the drain-reason tags it owns. The check order, the runner's prefetch, the health
program's non-disruptive set, the default profiles, the drain tags and `slurmkit check`'s help all derive from here.
"""

from __future__ import annotations

from ...record import Record

PROFILES = ("prolog", "epilog", "full", "health")


class CheckInfo(Record, frozen=True, kw_only=False):
    name: str
    source: str | None  # the command its live run reads first (the runner prefetches them together); None: its own
    disruptive: bool  # uses the GPUs (memory, compute): never beside a job, its heavy run is a sweep job
    beside_job: bool  # the health program runs it on a node with a job (reads counters and logs only)
    profiles: tuple[str, ...]  # the default profiles (health.profiles) that run it
    tags: tuple[str, ...] = ()  # drain-reason tags it owns beyond its name ("xid79" starts with "xid")
    what: str = ""  # one line for `slurmkit check --help`


# in the order they run; nccl's heavy run is never prefetched, and in the hooks nccl and dcgm read cached verdicts
CHECKS: tuple[CheckInfo, ...] = (
    CheckInfo("xid", "dmesg", False, True, ("prolog", "epilog", "full", "health"), ("sxid",), "kernel-log GPU faults"),
    CheckInfo("gpu_count", "q", False, True, ("prolog", "full", "health"), (), "GPUs visible"),
    CheckInfo("ecc", "q", False, True, ("prolog", "epilog", "full", "health"), (), "ECC errors, row remapping"),
    CheckInfo("recovery", "q", False, True, ("prolog", "full", "health"), (), "the driver's recovery action"),
    CheckInfo("driver", "q", False, True, ("prolog", "full", "health"), (), "driver and CUDA versions"),
    CheckInfo("pcie", "q", False, True, ("prolog", "full", "health"), (), "PCIe link width and speed"),
    CheckInfo("clocks", "q", False, True, ("prolog", "full", "health"), (), "clock slowdowns the hardware holds"),
    CheckInfo("fabric", "q", False, True, ("prolog", "full", "health"), (), "NVLink fabric state and health"),
    # a node without InfiniBand (no ibstat, no HCA) and without ib settings skips it: safe in every profile
    CheckInfo("ib", "ibstat", False, True, ("prolog", "full", "health"), (), "InfiniBand ports up, Active, at rate"),
    CheckInfo("temperature", "q", False, True, ("prolog", "full", "health"), (), "GPU and memory temperature"),
    CheckInfo("vbios", "q", False, True, ("prolog", "full", "health"), (), "one VBIOS per GPU model, pinned versions"),
    CheckInfo("gpu_config", "q", False, True, ("prolog", "full", "health"), (), "persistence mode, application clocks"),
    CheckInfo("nvlink", "nvlink_s", False, True, ("full", "health"), (), "NVLink links up"),
    CheckInfo("gpu_procs", "q", False, False, ("prolog", "epilog", "full", "health"), (), "processes left on the GPUs"),
    # reads /proc: after a job (epilog) and between jobs, not in the prolog, which the previous epilog covered
    CheckInfo("dstate", None, False, True, ("epilog", "full", "health"), (), "processes stuck in D state on a GPU"),
    # reads the job-efficiency log: after a multi-node job (epilog, last, once its peers' records are in) and between
    # jobs (the health program judges what an epilog could not yet)
    CheckInfo("straggler", None, False, True, ("epilog", "health"), (), "kept pace with its jobs' other nodes"),
    CheckInfo("nccl", None, True, False, ("prolog", "full", "health"), (), "all_reduce_perf bus bandwidth"),
    CheckInfo("dcgm", None, True, False, ("prolog", "health"), (), "DCGM diagnostic"),
)

BY_NAME = {c.name: c for c in CHECKS}
ORDER = [c.name for c in CHECKS]
SOURCES = {c.name: c.source for c in CHECKS if c.source}
BESIDE_JOB = tuple(c.name for c in CHECKS if c.beside_job)  # a job's own GPU processes are not findings
# every tag a drain reason can start with, longest first where one is the start of another ("sxid" before "xid")
DRAIN_TAGS = tuple(sorted({t for c in CHECKS for t in (c.name, *c.tags)}, key=lambda t: (-len(t), t)))


def default_profiles() -> dict[str, list[str]]:
    return {p: [c.name for c in CHECKS if p in c.profiles] for p in PROFILES}
