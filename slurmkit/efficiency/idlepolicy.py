"""The idle policy (issue 34), the decision: pure functions over a running job's GPU samples and the site's
`idle_policy` settings. The sampler feeds every sample to an `IdleRuns`, and asks `decide()` now and then; what
`decide()` returns is done at the edge (efficiency/idleact.py).

A GPU is idle while its samples read at or under `util_pct`; a sample without a reading (MIG, an nvidia-smi
`[N/A]`, a tool that failed) is NOT idle: the policy never acts on what it could not see. A job is idle for the
shortest idle run of its GPUs, measured between samples (no samples, no growth: a hung tool never makes a job
look idle longer). Standard library only (the sampler imports this on every GPU node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..settings import IdlePolicySettings

# the stages of one idle run of a job: nothing yet, noticed, acted on (cancelled/requeued), or left alone (exempt)
NONE, NOTICED, ACTED, EXEMPT = "none", "noticed", "acted", "exempt"


class IdleRuns:
    """Per GPU: since when its samples have read idle (None: its last sample was busy or unreadable), and the
    time of its last sample. Bounded: two numbers a GPU, however long the job."""

    def __init__(self, gpus: list[int], util_pct: float) -> None:
        self.gpus = list(gpus)
        self.util_pct = float(util_pct)
        self.since: dict[int, float | None] = {g: None for g in self.gpus}
        self.last: dict[int, float | None] = {g: None for g in self.gpus}
        self.breaks = 0  # idle runs broken by a busy or unreadable sample (a new run restarts the stages)

    def add(self, t: float, gpu: int, util: float | None) -> None:
        if gpu not in self.since:
            return
        idle = isinstance(util, (int, float)) and not isinstance(util, bool) and util <= self.util_pct
        if not idle:
            if self.since[gpu] is not None:
                self.breaks += 1
            self.since[gpu] = None
        elif self.since[gpu] is None:
            self.since[gpu] = t
        self.last[gpu] = t

    def idle_seconds(self) -> float | None:
        """How long ALL the job's GPUs have been idle (the shortest run), None when one of them is not idle."""
        runs = []
        for g in self.gpus:
            since, last = self.since[g], self.last[g]
            if since is None or last is None:
                return None
            runs.append(max(0.0, last - since))
        return min(runs) if runs else None


def exempt_reason(policy: IdlePolicySettings, job: dict) -> str | None:
    """Why the policy leaves this job alone, or None. `job`: user, account, partition, num_nodes (from Slurm's
    job record). A multi-node job is left alone: this node's sampler sees only its own GPUs."""
    for key, names in (
        ("account", policy.exempt_accounts),
        ("partition", policy.exempt_partitions),
        ("user", policy.exempt_users),
    ):
        val = job.get(key)
        if val and val in names:
            return f"{key} {val} is exempt (idle_policy.exempt_{key}s)"
    # a partition list (a job submitted to several) is exempt when any is: the site named it for a reason
    for p in str(job.get("partition") or "").split(","):
        if p and p in policy.exempt_partitions:
            return f"partition {p} is exempt (idle_policy.exempt_partitions)"
    n = job.get("num_nodes")
    if isinstance(n, int) and n > 1:
        return f"a {n}-node job: this node sees only its own GPUs (left to `slurmkit report idle`)"
    return None


def decide(policy: IdlePolicySettings, idle_seconds: float | None, stage: str) -> str:
    """What to do now: "notice", "act", "reset" (the idle run broke: start over) or "none". `stage` is where this
    job's current idle run is (NONE, NOTICED, ACTED, EXEMPT). The exemption is asked by the caller once the notice
    is due (it needs Slurm's job record, which is not fetched for a busy job)."""
    if not policy.enabled:
        return "none"
    if idle_seconds is None:
        return "reset" if stage in (NOTICED, EXEMPT) else "none"
    if stage in (ACTED, EXEMPT):
        return "none"
    if policy.action != "none" and idle_seconds >= policy.action_after:
        return "act"
    if stage == NONE and idle_seconds >= policy.notice_after:
        return "notice"
    return "none"


def action_for(policy: IdlePolicySettings, job: dict) -> str:
    """What the action is for this job: "requeue" while Slurm has restarted it fewer than requeue_limit times,
    else "cancel" (an idle job that comes back idle is not requeued forever); "none" for a notice-only policy."""
    if policy.action != "requeue":
        return policy.action
    restarts = job.get("restarts")
    return "requeue" if isinstance(restarts, int) and restarts < policy.requeue_limit else "cancel"


VERB = {"cancel": "cancelled", "requeue": "requeued"}


def notice_text(
    policy: IdlePolicySettings, job_id: int, node: str, gpus: list[int], idle_seconds: float, action: str
) -> str:
    """The line the job's owner reads in their output file."""
    what = VERB.get(action)
    then = (
        f"; the job will be {what} once they have been idle for {_dur(policy.action_after)}"
        if what and policy.action_after > idle_seconds
        else ""
    )
    return (
        f"slurmkit idle policy: job {job_id}: GPU(s) {','.join(map(str, gpus))} on {node} have been idle "
        f"(utilisation <= {policy.util_pct:g}%) for {_dur(idle_seconds)}{then}"
    )


def action_reason(policy: IdlePolicySettings, idle_seconds: float, action: str) -> str:
    """The job's Comment when the policy acts: says who and why in Slurm's own record."""
    limit = (
        f" (requeued {policy.requeue_limit} time(s) already)"
        if policy.action == "requeue" and action == "cancel"
        else ""
    )
    return (
        f"slurmkit idle policy: {VERB[action]}, all GPUs idle (<= {policy.util_pct:g}%) for {_dur(idle_seconds)}"
        + limit
    )


def _dur(seconds: float) -> str:
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s / 3600:.1f} h"
