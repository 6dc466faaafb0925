"""Back after a GPU fault (issue 29): the child died and its node went bad during the job -> requeue onto healthy
nodes, from the newest durable checkpoint. A child that failed on a healthy node (its own bug) is never requeued.

capture -> decide -> act:
- capture (`node_findings`): the node's light fault checks, as the epilog runs them: `xid` (fatal Xid/SXid and the
  GPU-failure signatures of the kernel log, new since the last prolog on this node: since this job's prolog) and
  `gpu_count` (a GPU that vanished). Read only: the Xid mark is the hooks' to move (no `commit`), so the epilog
  that runs after this job still sees the same fault and drains the node with its `slurmkit:` reason before the
  requeue completes (Slurm finishes a requeue only after the epilog). Where the job's user cannot read the kernel
  log, the check says so ("skip"/"unknown"): that is no evidence of a fault, and nothing is requeued.
- decide (`decide`, pure): a fault only when the child ended badly (non-zero exit or a signal) AND a check failed.
- act (the runner): `requeue_decision("node-fault", ...)` (run.requeue_on, max_requeues, task 0), `scontrol requeue`,
  this node excluded from the job's next run (`ExcNodeList`, in case no hook drains it), the short restart delay.
"""

from __future__ import annotations

from ..record import Record

FAULT_CHECKS = ("xid", "gpu_count")


class Fault(Record, frozen=True, kw_only=False):
    fault: bool
    why: str
    checks: tuple[str, ...] = ()


def decide(exit_code: int | None, findings: list[dict]) -> Fault:
    """Pure. `exit_code`: the child's (128+N for a signal N; None: still running); `findings`: one dict per check
    run ({check, status, reason, code})."""
    if exit_code is None or exit_code == 0:
        return Fault(False, "the command did not fail")
    bad = [f for f in findings if f.get("status") == "fail"]
    if not bad:
        seen = ", ".join(f"{f.get('check')}={f.get('status')}" for f in findings) or "no check ran"
        return Fault(False, f"the command failed (exit {exit_code}) on a healthy node ({seen}): not requeued")
    first = bad[0]
    tag = first.get("code") or first.get("check")
    return Fault(
        True,
        f"exit {exit_code} with a node fault: {tag} {first.get('reason', '')}".strip(),
        tuple(str(f.get("check")) for f in bad),
    )


def node_findings(settings, job_id: str | None, node: str | None = None) -> list[dict]:
    """Run the light fault checks on this node (read only); never raises: a check that cannot run is reported
    with status "unknown"."""
    try:
        from ..health.runner import run_checks

        rep = run_checks(settings, "epilog", only=list(FAULT_CHECKS), node=node, job_id=job_id, budget=30.0)
    except Exception as e:  # noqa: BLE001 - no evidence of a fault: no requeue, and say why
        return [{"check": "health", "status": "unknown", "reason": f"{type(e).__name__}: {e}"}]
    return [{"check": r.check, "status": r.status, "reason": r.reason, "code": r.code} for r in rep.results]
