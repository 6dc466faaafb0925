"""Issue 30's twelve tasks, the ones not tested elsewhere, on the real dev cluster (docs/submit.md "The twelve
tasks" says which test covers each): a grid sweep whose throttle (`sweep_parallel`) holds, 20 jobs from one Python
driver collected with `as_completed` and their results read from their outputs, a bad spec refused by the CLI with
exit 2 and file:line before anything is submitted, and one GPU with env plus a venv (made in tmp_path) activated by
`setup:`. Already covered elsewhere: afterok chain, placement, comment, mem_per_gpu (test_submit_keys.py); jobs/
logs/cancel, accelerate/deepspeed rendezvous, preempt and resume (test_jobs_cluster.py); 2-node torchrun
(test_submit.py)."""
import json
import subprocess
import sys

import pytest

import slurmkit
from slurmkit import api


def client(cluster):
    return api.Client(cluster.site_config)


@pytest.mark.compat("submit")
def test_a_sweep_runs_every_point_and_never_more_than_its_throttle_at_once(clean, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = client(clean).submit({
        "name": "throttle", "partition": "gpu", "gpus_per_node": 1, "time": "10:00",
        "command": f'echo "$LR $SEED $(date +%s.%N)" > {out}/$SLURM_ARRAY_TASK_ID.start; sleep 2; '
                   f'date +%s.%N > {out}/$SLURM_ARRAY_TASK_ID.end',
        "sweep": {"LR": ["1e-4", "3e-4", "1e-3"], "SEED": ["1", "2"]}, "sweep_parallel": 2,
        "output": "/dev/null"})
    assert job.is_array() and len(job.tasks()) == 6
    shown = clean.run("scontrol", "show", "job", str(int(job))).stdout
    assert "ArrayTaskThrottle=2" in shown, shown
    assert job.wait(timeout=120) == "COMPLETED"
    spans, points = [], set()
    for i in range(6):
        lr, seed, start = (out / f"{i}.start").read_text().split()
        points.add((lr, seed))
        spans.append((float(start), float((out / f"{i}.end").read_text())))
    assert points == {(lr, s) for lr in ("1e-4", "3e-4", "1e-3") for s in ("1", "2")}
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most <= 2, f"{most} tasks ran at once under sweep_parallel: 2 ({spans})"


@pytest.mark.compat("submit")
def test_twenty_jobs_from_one_driver_come_back_with_their_results(clean, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    c = client(clean)
    jobs = [c.submit({"name": "driver", "partition": "gpu", "gpus_per_node": 1, "time": "10:00",
                      "env": {"X": str(i)}, "command": 'echo "result $((X * X))"',
                      "output": str(out / "%j.out")}) for i in range(20)]
    index = {j.id: i for i, j in enumerate(jobs)}
    assert len(index) == 20
    results = {}
    for job in slurmkit.as_completed(jobs, timeout=120):
        assert job.state() == "COMPLETED" and job.exit_code == 0
        results[index[job.id]] = job.tail(1)
    assert results == {i: [f"result {i * i}"] for i in range(20)}


@pytest.mark.compat("submit")
def test_a_bad_spec_exits_2_with_file_and_line_and_submits_nothing(clean, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad-spec\npartition: gpu\ngpus_per_node: 1\ntime: 4h\ncommand: [python, t.py]\n")
    r = clean.slurmkit("submit", str(bad))
    assert r.returncode == 2 and r.stdout == ""
    assert f"{bad}:4: time: expected a Slurm time" in r.stderr, r.stderr
    bad.write_text("name: bad-spec\npartition: gpu\ngpu_per_node: 1\ncommand: [python, t.py]\n")
    r = clean.slurmkit("submit", str(bad))
    assert r.returncode == 2 and f"{bad}:3:" in r.stderr and "did you mean 'gpus_per_node'" in r.stderr, r.stderr
    queued = clean.run("squeue", "-h", "-n", "bad-spec", "-o", "%i").stdout.strip()
    assert queued == ""


@pytest.mark.compat("submit")
def test_one_gpu_with_env_and_a_venv_activated_by_setup(clean, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: venv-probe\npartition: gpu\ngpus_per_node: 1\ntime: '10:00'\n"
                    f"output: {tmp_path}/%j.out\nenv: {{LR: '3e-4'}}\n"
                    f"setup: ['source {venv}/bin/activate']\n"
                    "command: python -c 'import os, sys; print(sys.prefix, os.environ[\"LR\"], "
                    "os.environ[\"CUDA_VISIBLE_DEVICES\"])'\n")
    r = clean.slurmkit("submit", str(spec), "--json")
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["job_id"]
    assert clean.wait_job(job, states=("COMPLETED", "FAILED"), timeout=60).state == "COMPLETED"
    prefix, lr, gpus = (tmp_path / f"{job}.out").read_text().split()
    assert (prefix, lr) == (str(venv), "3e-4") and len(gpus.split(",")) == 1
