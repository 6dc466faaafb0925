"""The wrapper's pure decisions: timeout or preemption, requeue or not, the launcher's environment, a spot
notice's text."""

from __future__ import annotations

import json
from ..record import Record
from datetime import datetime


FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT")
TERMINATING = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


# --- pure decisions --------------------------------------------------------------------------------------------


def classify(elapsed: float | None, limit: float | None, window: float = 600.0, fraction: float = 0.8) -> str:
    """'timeout' or 'preemption' for a trigger signal at `elapsed` seconds into a job of time limit `limit`.

    As submitit does: a job past min(fraction * limit, limit - window) has timed out; a signal before that
    came from a preemption (PreemptParameters=send_user_signal). No limit (UNLIMITED): a preemption. Unknown
    elapsed time: 'unknown'."""
    if limit is None:
        return "preemption"
    if elapsed is None:
        return "unknown"
    guaranteed = min(limit * fraction, limit - window)
    return "timeout" if elapsed >= guaranteed else "preemption"


class Decision(Record, frozen=True, kw_only=False):
    requeue: bool
    why: str


def requeue_decision(
    kind: str,
    *,
    job_id: str | None,
    restarts: int,
    max_requeues: int,
    requeue_on: list[str],
    leader: bool,
    cancelled: bool = False,
    dry_run: bool = False,
) -> Decision:
    """Whether the wrapper should requeue after asking its child to checkpoint."""
    if not job_id:
        return Decision(False, "not a Slurm job (no SLURM_JOB_ID)")
    if not leader and kind != "node-fault":
        # a node fault is seen only by the tasks on that node: any of them requeues the job
        return Decision(False, "not task 0: task 0 requeues the job")
    if cancelled:
        return Decision(False, "the job was cancelled or hit its time limit (TERM from outside)")
    effective = "preemption" if kind == "unknown" else kind
    if effective not in requeue_on:
        return Decision(False, f"{kind} is not in run.requeue_on ({', '.join(requeue_on) or 'empty'})")
    if restarts >= max_requeues:
        return Decision(False, f"requeue limit reached: SLURM_RESTART_COUNT={restarts} >= max_requeues={max_requeues}")
    return Decision(
        True,
        f"{kind}, restart {restarts + 1} of at most {max_requeues}" + (" (dry run: not requeueing)" if dry_run else ""),
    )


def dist_env(environ: dict[str, str], master_port: int | None = None) -> dict[str, str]:
    """Variables torch.distributed & co expect, derived from Slurm's; ones already in `environ` are kept."""
    out: dict[str, str] = {}
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if nodelist:
        from ..slurm import expand_hostlist

        try:
            nodes = expand_hostlist(nodelist)
        except Exception:  # noqa: BLE001 - an unreadable nodelist: no MASTER_ADDR, the launcher says so
            nodes = []
        if nodes:
            out["MASTER_ADDR"] = nodes[0]
    job_id = environ.get("SLURM_JOB_ID", "")
    if master_port:
        out["MASTER_PORT"] = str(master_port)
    elif job_id.isdigit():
        out["MASTER_PORT"] = str(20000 + int(job_id) % 20000)
    world = environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS") or environ.get("SLURM_NNODES")
    if world:
        out["WORLD_SIZE"] = world
    if environ.get("SLURM_STEP_ID") is not None and environ.get("SLURM_PROCID") is not None:
        # one wrapper per task (srun slurmkit run ...): this task's ranks. Not in the batch step, where they
        # would leak into every task that `srun` starts from it.
        for ours, theirs in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID"), ("NODE_RANK", "SLURM_NODEID")):
            if environ.get(theirs) is not None:
                out[ours] = environ[theirs]
    return {k: v for k, v in out.items() if k not in environ}


def parse_instance_action(text: str) -> dict:
    """AWS spot/instance-action JSON -> {'action': 'terminate', 'time': '...', 'epoch': float | None}."""
    try:
        data = json.loads(text)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    when = str(data.get("time", ""))
    epoch = None
    if when:
        try:
            epoch = datetime.strptime(when.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            epoch = None
    return {"action": str(data.get("action", "unknown")), "time": when, "epoch": epoch}
