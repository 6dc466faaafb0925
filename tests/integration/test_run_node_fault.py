"""Issue 29, the fault drill (1 node): a job training with checkpoints; mid-run its node's GPU falls off the bus
(the node's fake GPU tools switched to the real Xid 79 capture) and its trainer dies as a CUDA error would kill it
(SIGABRT, what NCCL's watchdog does). `slurmkit run` finds the fault on its node (the same light checks the
epilog runs: Xid since this job's prolog), requeues the job (`node-fault`), the epilog drains the node before the
requeue completes, and the job trains again on a healthy node from its newest durable checkpoint.

And the other side: a trainer that fails on a healthy node (its own bug) is never requeued
(test_run_requeue.py's SIGKILL test asserts that too, with node-fault on by default).
"""
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from slurmkit import checkpoint

from test_run_requeue import uninterrupted

TOY = Path(__file__).resolve().parents[1] / "toy_train.py"
PY = sys.executable


def _script(tmp: Path, durable: Path, target: int, exit_code: int | None = None) -> str:
    # node-local checkpoints: one directory per node, as on real nodes (a requeued job on another node finds none)
    return ("#!/bin/sh\n"
            f"L={tmp}/local-$SLURMD_NODENAME\n"
            f"exec {PY} -m slurmkit.cli run --grace 15 --checkpoint-dir \"$L\" --durable {durable} "
            f"-- {PY} {TOY} \"$L\" {target} 0.1 5 64\n")


def _child_pid(out: Path, nth: int, timeout=30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = re.findall(r"event=start pid=(\d+)", out.read_text() if out.exists() else "")
        if len(pids) >= nth:
            return int(pids[nth - 1])
        time.sleep(0.1)
    raise AssertionError(f"no event=start #{nth} in {out}")


@pytest.mark.slow
@pytest.mark.compat("run/requeue")
def test_gpu_off_the_bus_drains_the_node_and_the_job_trains_again_elsewhere(clean, tmp_path):
    target = 400
    durable, out = tmp_path / "durable", tmp_path / "job.out"
    job = clean.sbatch(_script(tmp_path, durable, target), "--time=30", "--requeue", "--gres=gpu:1",
                       "--open-mode=append", f"--output={out}")
    rec = clean.wait_job(job, states=("RUNNING",), timeout=30)
    node = rec.nodes
    pid = _child_pid(out, 1)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        got = checkpoint.latest(str(durable))
        if got is not None and got.step >= 20:
            break
        time.sleep(0.3)
    assert got is not None and got.step >= 20, out.read_text()
    # the fault: the node's GPU falls off the bus, and the trainer dies of it
    clean.set_scenario(node, "xid79")
    os.kill(pid, signal.SIGABRT)
    fault = time.monotonic()
    deadline = fault + 90
    while time.monotonic() < deadline:
        if "restart=1 event=resumed" in out.read_text():
            break
        time.sleep(0.2)
    back = time.monotonic() - fault
    log = out.read_text()
    assert "restart=1 event=resumed" in log, log
    first, second = log.split("restart=1 event=", 1)
    assert "event=child-exit code=134 signal=SIGABRT" in first, first
    assert re.search(r"event=node-fault reason=\"exit 134 with a node fault: xid79 GPU 0000:5d:00 fell off", first), first
    assert "event=requeued kind=node-fault restart=1" in first, first
    # the node was drained (by the epilog, with slurmkit's reason) and the job runs on another one
    n = clean.node(node)
    assert n.drained and n.reason.startswith("slurmkit:xid79"), n
    rec = clean.backend.job(job)
    assert rec.restarts == 1 and rec.nodes != node, rec
    # from its newest durable checkpoint: the last one replicated before the fault
    last = int(re.findall(r"event=replicated checkpoint=step-(\d+)", first)[-1])
    assert re.search(rf"restart=1 event=restored step={last} ", log), log
    assert f"restart=1 event=resumed step={last} " in log, log
    assert back <= 60, f"training again {back:.1f}s after the fault"
    print(f"fault -> training again on {rec.nodes}: {back:.1f}s; resumed at step {last}")
    done = clean.wait_job(job, states=("COMPLETED", "FAILED", "CANCELLED"), timeout=120)
    assert done.state == "COMPLETED", out.read_text()
    final = checkpoint.latest(str(tmp_path / f"local-{done.nodes}"), verify=True)
    import json
    assert json.loads((Path(final.path) / "state.json").read_text()) == {
        "step": target, "value": uninterrupted(tmp_path, target)}


@pytest.mark.compat("run/requeue")
def test_a_trainer_that_fails_on_a_healthy_node_is_not_requeued(clean, tmp_path):
    durable, out = tmp_path / "durable", tmp_path / "job.out"
    job = clean.sbatch(_script(tmp_path, durable, 10_000), "--time=30", "--requeue", "--gres=gpu:1",
                       f"--output={out}")
    clean.wait_job(job, states=("RUNNING",), timeout=30)
    pid = _child_pid(out, 1)
    time.sleep(1.0)
    os.kill(pid, signal.SIGABRT)                   # the same death, but the node is healthy: the job's own bug
    rec = clean.wait_job(job, states=("FAILED", "COMPLETED", "CANCELLED"), timeout=60)
    time.sleep(3)
    rec = clean.backend.job(job)
    log = out.read_text()
    assert rec.state == "FAILED" and rec.restarts == 0, (rec, log)
    assert "event=no-node-fault" in log and "healthy node" in log, log
    assert "event=requeued" not in log


def _node_of(pid: int) -> str:
    """The dev cluster's nodes all run on this host: a task's node is in its environment."""
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"SLURMD_NODENAME="))


@pytest.mark.compat("run/requeue")
# Once intermittent (one fresh-clone CI run of four): node 1's copy child found nothing to copy for every step node 0
# had made durable ("replicate-failed ... no report"): its trainer's keep=3 had pruned the step between the wrapper's
# choice and the child's scan. The replicator now pins what it copies (checkpoint/pin.py; tests/unit/checkpoint/test_pin.py).
def test_two_node_job_gpu_fault_on_one_node_resumes_from_a_complete_step(clean, tmp_path):
    """The 2-node drill: one wrapper per node (`srun --ntasks-per-node=1 slurmkit run ...`), each node saving its
    own shard to node-local disk and replicating it to DEST/node-<rank>. Node B's GPU falls off the bus and its
    trainer dies; B's wrapper requeues the job; the epilog drains B; the job trains again on two healthy nodes from
    the newest step that BOTH nodes had made durable (never one only one node had)."""
    target = 400
    durable, out = tmp_path / "durable", tmp_path / "job.out"
    script = (f"#!/bin/sh\nexec srun --kill-on-bad-exit=1 --ntasks-per-node=1 {PY} -m slurmkit.cli run --grace 15 "
              f"--checkpoint-dir {tmp_path}/local-{{node}} --durable {durable} "
              f"-- sh -c 'exec {PY} {TOY} \"$SLURMKIT_CHECKPOINT_DIR\" {target} 0.1 5 64'\n")
    job = clean.sbatch(script, "-N2", "--time=30", "--requeue", "--gres=gpu:1", "--open-mode=append",
                       f"--output={out}")
    clean.wait_job(job, states=("RUNNING",), timeout=30)
    pid = _child_pid(out, 2)
    node = _node_of(pid)
    from slurmkit.checkpoint.parts import durable_steps
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        steps, parts = durable_steps(str(durable)) if durable.exists() else ([], None)
        if parts == 2 and steps and int(steps[-1][5:]) >= 20:
            break
        time.sleep(0.3)
    assert parts == 2 and steps, out.read_text()
    clean.set_scenario(node, "xid79")
    os.kill(pid, signal.SIGABRT)
    fault = time.monotonic()
    complete_at_fault = durable_steps(str(durable))[0]
    deadline = fault + 90
    while time.monotonic() < deadline and out.read_text().count("restart=1 event=resumed") < 2:
        time.sleep(0.2)
    back = time.monotonic() - fault
    log = out.read_text()
    assert log.count("restart=1 event=resumed") == 2, log
    first = log.split("restart=1 event=", 1)[0]
    assert "event=requeued kind=node-fault restart=1" in first, first
    n = clean.node(node)
    assert n.drained and n.reason.startswith("slurmkit:xid79"), n
    rec = clean.backend.job(job)
    assert rec.restarts == 1 and node not in clean.run("scontrol", "show", "hostnames", rec.nodes).stdout.split()
    resumed = {int(s) for s in re.findall(r"restart=1 event=resumed step=(\d+) ", log)}
    assert len(resumed) == 1, log                            # both nodes resumed from the same step ...
    step = resumed.pop()
    assert f"step-{step:010d}" in complete_at_fault or step > int(complete_at_fault[-1][5:]), (step, complete_at_fault)
    assert back <= 60, f"training again {back:.1f}s after the fault"
    print(f"2-node fault -> training again on {rec.nodes}: {back:.1f}s; resumed at step {step} "
          f"(complete at DEST when the fault hit: {complete_at_fault[-1]})")
    clean.backend.cancel(job)
