"""The HealthCheckProgram entry point (health/health, a link to bin/slurmkit-hook, calls its `run()`).

slurmd runs it every HealthCheckInterval seconds with no PATH, no SLURM_CONF and only SLURMD_NODENAME, and its
exit code never drains a node: it drains by itself, with the prolog's etiquette (never over a reason slurmkit did
not write). It never overlaps itself (a lock per node; a run that finds one in progress exits at once) and stays
inside `health.periodic_budget_seconds` (below Slurm's 60 s kill, or 26.05's HealthCheckTimeout). It knows the
node's state: nothing runs while slurmd is not registered yet or the node is down, rebooting, powered down or in
maintenance; on a node with a job, only the checks that cannot disturb it (kernel log, ECC/remap, GPU count,
driver, PCIe, NVLink). Light imports, as the prolog's.
"""

from __future__ import annotations

import os
import sys

from ..health.checks.registry import BESIDE_JOB
from ..drain import HANDS_OFF, Action  # the one list of hands-off node flags, shared with the drain
from .common import fail_safe, load_settings, run_hook

# what may run beside a job: they read counters and logs, never touch the GPUs' memory or compute (the registry's)
NON_DISRUPTIVE = BESIDE_JOB
BUSY_STATES = {"ALLOCATED", "MIXED", "COMPLETING"}


def find_slurm_conf(environ) -> None:
    """HealthCheckProgram gets no SLURM_CONF: take the one slurmd runs with (`-f PATH` or its SLURM_CONF), so the
    Slurm tools reach the same controller. Configless nodes need nothing (the tools find slurmd's cache)."""
    if environ.get("SLURM_CONF"):
        return
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/cmdline", "rb") as f:
            argv = f.read(65536).split(b"\0")
    except OSError:
        return
    if not argv or not os.path.basename(argv[0].decode(errors="replace")).startswith("slurmd"):
        return
    for i, a in enumerate(argv):
        if a == b"-f" and i + 1 < len(argv) and argv[i + 1]:
            environ["SLURM_CONF"] = argv[i + 1].decode(errors="replace")
            return
    try:
        with open(f"/proc/{ppid}/environ", "rb") as f:
            for kv in f.read(1 << 20).split(b"\0"):
                if kv.startswith(b"SLURM_CONF="):
                    environ["SLURM_CONF"] = kv[len(b"SLURM_CONF=") :].decode(errors="replace")
                    return
    except OSError:
        return


def plan(record) -> tuple[str, tuple[str, ...] | None]:
    """What to run for the node's Slurm record (pure): ("skip: why", ()), ("busy", NON_DISRUPTIVE) or
    ("idle", None = the whole health profile). No record (the controller could not be asked): the checks that
    are safe either way, so a fault is still found and its drain recorded for later."""
    if record is None:
        return "unknown", NON_DISRUPTIVE
    flags = set(record.flags)
    if record.state in ("DOWN", "FUTURE", "UNKNOWN") or "NOT_RESPONDING" in flags:
        return f"skip: node is {record.state_text or record.state}", ()
    if HANDS_OFF & flags:
        return f"skip: node is {'+'.join(sorted(HANDS_OFF & flags))}", ()
    if record.state in BUSY_STATES or record.cpus_alloc or record.gpus_used:
        return "busy", NON_DISRUPTIVE
    return "idle", None


def _lock(settings, node: str):
    import fcntl

    os.makedirs(settings.paths.state_dir, exist_ok=True)
    fd = os.open(
        os.path.join(settings.paths.state_dir, f"health-{node}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _remediation(settings, node: str):
    """(the node's health-log records, this boot's id, the reboot-asked record this boot follows) when
    health.remediate is on, else None."""
    if not settings.health.remediate:
        return None
    from ..health import remediate
    from ..health.checks.xid import boot_id

    records = remediate.history(settings, node)
    boot = boot_id(settings, node)
    return records, boot, remediate.after_reboot(records or [], boot)


def dry_run(settings, node: str, rec) -> int:
    """What remediation would do with the node now; runs no check and changes nothing."""
    from ..health import remediate

    h = settings.health
    records = remediate.history(settings, node)
    if records is None:
        print(f"{node}: remediation would do nothing: the health log {settings.paths.health_log} cannot be read")
        return 0
    d = remediate.decision(settings, rec, records)
    what = {
        "none": "nothing",
        "reboot": "reboot it (scontrol reboot: it stays drained until its recheck passes)",
        "flapping": "leave it drained as flapping",
        "resume": "resume it",
        "returned": "log that it is back in service (not resumed by slurmkit)",
    }[d.step]
    off = "" if h.remediate else " (health.remediate is off: nothing would run)"
    print(f"{node}: remediation would do {what}: {d.why}{off}")
    return 0


def main(environ=None, *, dry=False) -> int:
    environ = os.environ if environ is None else environ
    find_slurm_conf(environ)
    settings = load_settings("health")
    if settings is None:
        return 1
    from ..health.runner import node_name

    node = environ.get("SLURMD_NODENAME") or node_name()
    lock = _lock(settings, node)
    if lock is None:
        print(f"slurmkit health: {node}: a run is still in progress; this one exits", file=sys.stderr)
        return 0
    try:
        from ..errors import SlurmkitError
        from ..slurm import get_backend

        backend = get_backend(settings)
        try:
            recs = [r for r in backend.nodes(node) if r.name == node]
        except SlurmkitError as e:
            print(
                f"slurmkit health: {node}: cannot read the node's state ({e}); running the safe checks", file=sys.stderr
            )
            recs = None
        if recs == []:
            print(f"slurmkit health: {node}: not registered with the controller yet; nothing run", file=sys.stderr)
            return 0
        if dry:
            return dry_run(settings, node, recs[0] if recs else None)
        mode, checks = plan(recs[0] if recs else None)
        rem = _remediation(settings, node) if recs else None
        if rem and rem[2] is not None:
            # slurmkit's own reboot, first run of the new boot: out of service until the recheck passes
            from ..health import remediate

            held = remediate.hold(settings, node, rem[2], backend=backend)
            if held is not None:
                print(f"slurmkit health: {node}: {held['action']}: {held['reason']}", file=sys.stderr)
            if mode.startswith("skip") and any(w in mode for w in ("REBOOT", "DOWN", "NOT_RESPONDING")):
                mode, checks = "rebooted", None  # recheck everything on the new boot, before slurmd registers
        if mode.startswith("skip"):
            return 0
        env = {k: v for k, v in environ.items() if not k.startswith(("SLURM_JOB", "CUDA_VISIBLE"))}
        env["SLURMD_NODENAME"] = node
        report, action = run_hook(
            "health", settings, env, checks=checks, job_gpus=None, budget=settings.health.periodic_budget_seconds
        )
        if rem:
            _remediate(settings, node, backend, rem, report, action)
        return 0 if report.healthy else 1
    finally:
        os.close(lock)


def _remediate(settings, node: str, backend, rem, report, action: Action) -> None:
    from ..health import remediate

    records, boot, asked = rem
    if asked is not None and boot and records is not None:
        # slurmd runs this first run of the new boot before it registers (measured on 22.05: waiting here for
        # the registration only delays it), so slurmctld still shows the node DOWN: the node stays drained (the
        # reboot's own drain, or the hold above), a passed recheck resumes it once slurmd has registered (act, on
        # a later run), a failed one leaves it drained for the next reboot
        records = records + remediate.recheck_done(settings, node, asked, report, boot, action)
    step = remediate.act(settings, node, backend=backend, boot_id=boot, records=records, healthy=report.healthy)
    if step is not None:
        print(f"slurmkit health: {node}: {step['action']}: {step['reason']}", file=sys.stderr)


def run() -> int:
    """What health/health (bin/slurmkit-hook) calls: main() with fail_safe's exit code."""
    return fail_safe("health", main)


if __name__ == "__main__":
    sys.exit(run())
