"""Issue 29: after `slurmkit run` requeues a job, the job is eligible again within seconds, not after Slurm's own
hold (BeginTime = the requeue's completion + the credential lifetime, ~121 s on 22.05, 24.11 and 26.05).

Nothing outside the job helps here (test_run_requeue.py's `drive` shortens the hold from outside; this test does
not). The figure asserted is Slurm's own: EligibleTime - SubmitTime of the requeued job (Slurm sets SubmitTime when
the requeue completes), so load on the machine cannot make it flaky; a generous stopwatch checks that the job
really runs again.
"""
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from slurmkit import checkpoint

TOY = Path(__file__).resolve().parents[1] / "toy_train.py"
PY = sys.executable


def _slurm_time(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S")


@pytest.mark.compat("run/requeue")
def test_requeued_job_is_eligible_again_within_seconds(clean, tmp_path):
    ck, out = tmp_path / "ck", tmp_path / "job.out"
    script = (f"#!/bin/sh\nexec {PY} -m slurmkit.cli run --grace 15 --checkpoint-dir {ck} "
              f"-- {PY} {TOY} {ck} 100000 0.1 5\n")
    job = clean.sbatch(script, "--time=30", "--requeue", "--open-mode=append", f"--output={out}")
    clean.wait_job(job, states=("RUNNING",), timeout=30)
    clean.wait_first_checkpoint(job, ck, out)
    # what Slurm sends at preemption with PreemptParameters=send_user_signal
    clean.run("scancel", "-b", "-s", "USR2", str(job))
    asked = time.monotonic()
    eligible = None
    try:
        while time.monotonic() < asked + 90:
            rec = clean.backend.job(job)
            if rec.restarts >= 1 and rec.state in ("PENDING", "RUNNING") and eligible is None:
                submit, elig = rec.raw.get("SubmitTime", ""), rec.raw.get("EligibleTime", "")
                if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", elig or "") and submit:
                    eligible = (_slurm_time(elig) - _slurm_time(submit)).total_seconds()
            if rec.restarts >= 1 and rec.state == "RUNNING":
                break
            time.sleep(0.3)
        ran_again = time.monotonic() - asked
        log = out.read_text()
        assert rec.restarts == 1 and rec.state == "RUNNING", (rec, log)
    finally:
        clean.backend.cancel(job)
    assert "event=requeued kind=preemption restart=1" in log, log
    assert "event=restart-soon delay=5s" in log, log
    # Slurm's hold was ~121 s; the wrapper's start time is 5 s after its run ends (the epilog runs meanwhile)
    assert eligible is not None and eligible <= 15, (eligible, rec.raw)
    # the signal, the child's checkpoint, the requeue, the epilog, 5 s, the prolog: well under the old 2 minutes
    assert ran_again < 60, ran_again
    print(f"requeue -> eligible {eligible:.0f}s after the requeue completed; running again {ran_again:.1f}s "
          "after the preemption signal")
