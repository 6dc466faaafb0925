"""Issue 29: `slurmkit run --durable DEST` replicates each complete checkpoint during the job, and a requeued job
whose node-local checkpoints are gone (its node died, or it lands on another node) resumes from DEST.

The job is preempted by hand (`scancel -b -s USR2`, what Slurm sends with PreemptParameters=send_user_signal);
while it waits to run again, the test deletes its node-local checkpoint directory, as a lost node would. The
requeued run restores DEST's newest checkpoint before the trainer starts, and the trainer's own
`checkpoint.latest()` finds it: the final state equals an uninterrupted run's.
"""
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from slurmkit import checkpoint

from test_run_requeue import final_state, uninterrupted

TOY = Path(__file__).resolve().parents[1] / "toy_train.py"
PY = sys.executable


@pytest.mark.compat("run/requeue")
def test_requeued_job_resumes_from_durable_after_node_local_loss(clean, tmp_path):
    target = 150
    local, durable, out = tmp_path / "local", tmp_path / "durable", tmp_path / "job.out"
    script = (f"#!/bin/sh\nexec {PY} -m slurmkit.cli run --grace 20 --checkpoint-dir {local} --durable {durable} "
              f"-- {PY} {TOY} {local} {target} 0.1 5 64\n")
    job = clean.sbatch(script, "--time=30", "--requeue", "--open-mode=append", f"--output={out}")
    clean.wait_job(job, states=("RUNNING",), timeout=30)
    # a few checkpoints replicated during the run (not by the epilog: the job is still running)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        got = checkpoint.latest(str(durable))
        if got is not None and got.step >= 20:
            break
        time.sleep(0.3)
    assert got is not None and got.step >= 20, out.read_text()
    assert clean.backend.job(job).state == "RUNNING"
    clean.run("scancel", "-b", "-s", "USR2", str(job))
    deadline = time.monotonic() + 60
    while "event=requeued" not in (out.read_text() if out.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    log = out.read_text()
    assert "event=requeued kind=preemption" in log, log
    shutil.rmtree(local)                                   # the node-local checkpoints die with the node
    rec = clean.wait_job(job, states=("COMPLETED", "FAILED", "CANCELLED"), timeout=120)
    log = out.read_text()
    assert rec.state == "COMPLETED" and rec.restarts == 1, (rec, log)
    first, second = log.split("event=requeued", 1)
    stopped = int(re.findall(r"toy: stopped step=(\d+)", first)[-1])
    replicated = [int(s) for s in re.findall(r"event=replicated checkpoint=step-(\d+)", first)]
    assert len(replicated) >= 2 and replicated[-1] == stopped, first      # the stop checkpoint became durable
    m = re.search(r"restart=1 event=restored step=(\d+) checkpoint=step-\d+ source=(\S+)", second)
    assert m and int(m.group(1)) == stopped and m.group(2) == str(durable), second
    assert f"restart=1 event=resumed step={stopped} " in second, second
    assert final_state(local) == {"step": target, "value": uninterrupted(tmp_path, target)}
    assert checkpoint.latest(str(durable), verify=True).step == target
