"""`slurmkit run`: the job wrapper that makes a job survive timeouts, preemption and spot reclaims.

Inside an sbatch script (submitted with `--signal=B:USR2@LEAD --requeue`):

    exec slurmkit run --checkpoint-dir /ckpt -- python train.py

The wrapper starts the command as a child (in its own process group), forwards TERM/INT/HUP/QUIT/USR1 (and USR2
when it is not the trigger) to that group, and on the trigger signal (USR2) or an AWS spot interruption notice:

1. decides what happened: a timeout when the time left is under `run.timeout_window` or past 80% of the limit
   (submitit's rule, from `scontrol show job`'s RunTime and TimeLimit), else a preemption; a spot notice is its
   own kind;
2. asks the child to checkpoint: creates $SLURMKIT_STOP_FILE and sends `run.checkpoint_signal` (TERM) to its
   process group; when the child is `srun` (which would turn a TERM into SIGKILL for every task), to every
   task of the job's steps through `scancel --signal=TERM JOBID` instead;
3. waits until the child exits, at most `run.grace` seconds (for a spot notice: until the announced time less
   `run.spot_margin`);
4. requeues the job with `scontrol requeue` if the kind is in `run.requeue_on`, SLURM_RESTART_COUNT is below
   `run.max_requeues`, this is task 0 (SLURM_PROCID) and nobody cancelled the job meanwhile (a TERM/INT from
   outside: scancel, the time limit).

A child that exits on its own before any of that is never requeued. The wrapper exits with the child's exit code
(128+N when a signal N killed it). Every event is one line on stderr:

    slurmkit run: 2026-11-30T09:40:00Z job=12 restart=0 event=signal signal=SIGUSR2

Events: start, resumed (step=N, with --checkpoint-dir), signal, checkpoint-asked, spot-notice, child-exit,
restart-soon (the requeued job may start again run.restart_delay seconds after this run ends),
grace-expired, requeued, no-requeue, requeue-failed, imds-error.

For multi-node jobs the child gets MASTER_ADDR (first node of SLURM_JOB_NODELIST), MASTER_PORT, WORLD_SIZE and,
when the wrapper runs as a task of a step (`srun slurmkit run -- ...`), RANK, LOCAL_RANK and NODE_RANK; variables
already set are left alone.

The decisions are pure functions (classify, requeue_decision, dist_env, parse_instance_action); the loop in
`Runner` is the imperative shell.
"""

from __future__ import annotations

from ..times import duration_or_none as parse_duration
from .decide import FORWARDED, TERMINATING, Decision, classify, dist_env, parse_instance_action, requeue_decision
from .imds import Imds, ImdsError, SpotWatcher
from .runner import RunOptions, Runner

__all__ = [
    "FORWARDED",
    "TERMINATING",
    "Decision",
    "Imds",
    "ImdsError",
    "RunOptions",
    "Runner",
    "SpotWatcher",
    "classify",
    "dist_env",
    "parse_duration",
    "parse_instance_action",
    "requeue_decision",
]
