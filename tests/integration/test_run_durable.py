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


@pytest.mark.compat("run/requeue")
def test_node_loss_resumes_within_one_interval_plus_the_replication_lag(clean, tmp_path):
    """The node-loss drill: the node dies with the job on it (every process of the job SIGKILLed: no checkpoint on
    the way out, no final copy, no epilog sync of its own) and its node-local disk is gone. Slurm requeues a
    requeueable job whose node failed; here the test does that (`scontrol requeue` on the finished job, then
    StartTime=now+2, as Slurm's own hold is not what is tested). The resumed run starts from what was durable
    when the node died: at most one checkpoint interval plus the replication lag behind the step at the loss."""
    every, delay = 5, 0.1
    local, durable, out = tmp_path / "local", tmp_path / "durable", tmp_path / "job.out"
    script = (f"#!/bin/sh\nexec {PY} -m slurmkit.cli run --grace 20 --checkpoint-dir {local} --durable {durable} "
              f"-- {PY} {TOY} {local} 100000 {delay} {every} 64\n")
    job = clean.sbatch(script, "--time=30", "--requeue", "--open-mode=append", f"--output={out}")
    clean.wait_job(job, states=("RUNNING",), timeout=30)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        got = checkpoint.latest(str(durable))
        if got is not None and got.step >= 40:
            break
        time.sleep(0.3)
    assert got is not None, out.read_text()
    trainer = int(re.search(r"event=start pid=(\d+)", out.read_text()).group(1))
    # the node dies: the trainer and the wrapper at once (the trainer's pid group, then the wrapper's parent)
    import os
    import signal
    at_loss = checkpoint.latest(str(local)).step
    with open(f"/proc/{trainer}/stat") as f:
        wrapper = int(f.read().rsplit(")", 1)[1].split()[1])    # the wrapper is the trainer's parent
    os.kill(wrapper, signal.SIGSTOP)                             # nothing new starts while the rest dies
    copier = []                                                  # a copy in flight dies with the node too
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                if d.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == wrapper:
                    copier.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    os.killpg(trainer, signal.SIGKILL)                          # the trainer leads its own process group
    for pid in copier:
        if pid != trainer:
            os.kill(pid, signal.SIGKILL)
    os.kill(wrapper, signal.SIGKILL)
    durable_at_loss = checkpoint.latest(str(durable)).step
    shutil.rmtree(local)
    clean.wait_job(job, states=("FAILED", "COMPLETED", "CANCELLED"), timeout=30)
    clean.run("scontrol", "requeue", str(job))
    deadline = time.monotonic() + 30
    while clean.backend.job(job).state != "PENDING" and time.monotonic() < deadline:
        time.sleep(0.2)
    clean.run("scontrol", "update", f"JobId={job}", "StartTime=now+2", check=False)
    deadline = time.monotonic() + 60
    while "restart=1 event=resumed" not in out.read_text() and time.monotonic() < deadline:
        time.sleep(0.3)
    log = out.read_text()
    clean.backend.cancel(job)
    m = re.search(r"restart=1 event=resumed step=(\d+) ", log)
    assert m, log
    resumed = int(m.group(1))
    assert resumed == durable_at_loss, (resumed, durable_at_loss)     # the newest durable one, complete
    # replication every 2 s at 0.1 s a step: at most 20 steps of lag plus the copy, plus one interval of 5 steps
    lags = [float(x) for x in re.findall(r"event=replicated .* lag=([\d.]+)s", log.split("restart=1 ")[0])]
    bound = every + (2.0 + max(lags)) / delay
    assert at_loss - resumed <= bound, (at_loss, resumed, bound)
    print(f"node loss at step >= {at_loss}; resumed at {resumed} (bound {bound:.0f} steps)")
