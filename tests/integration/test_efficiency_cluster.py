"""Per-job GPU efficiency on the real dev cluster (Slurm 22.05, real prolog/epilog as root, fake nvidia-smi
replaying a time series per node):

- four `sbatch --wrap` jobs (not wrapped by slurmkit run): busy, under-used, one idle GPU of 4, hung - each gets
  the right verdict in `slurmkit efficiency JOBID` and in `slurmkit report idle`;
- the sampler survives the prolog's exit (it samples while the job runs) and never outlives its job: with an
  epilog that does NOT stop it, its own watchdog ends it when the job is gone;
- a CPU-only job starts no sampler and leaves no record."""
import json
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCENARIOS = {"n1": ("eff-busy", 2, "busy"), "n2": ("eff-underused", 2, "underused"),
             "n3": ("eff-idle1of4", 4, "idle"), "n4": ("eff-hung", 2, "hung")}


def _log(cluster) -> str:
    """The job-efficiency log, in the health log's layout (the dev cluster's: one file per node)."""
    from slurmkit import config
    from slurmkit.efficiency import record
    return record.log_path(config.load(str(cluster.site_config)))


def _state_dir(cluster) -> Path:
    return cluster.dir / "slurmkit" / "state" / "efficiency"


def _records(cluster, job_id):
    from slurmkit.efficiency import record
    return [r for r in record.read(_log(cluster)) if r.get("job_id") == job_id]


def _wait_record(cluster, job_id, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = _records(cluster, job_id)
        if recs:
            return recs[-1]
        time.sleep(0.5)
    raise AssertionError(f"no efficiency record for job {job_id} in {_log(cluster)}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _sampler_pids(job_id: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                argv = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"slurmkit.efficiency.sampler" in argv and str(job_id).encode() in argv:
                out.append(int(p.name))
    return out


def test_four_jobs_get_their_verdicts(clean):
    c = clean
    jobs = {}
    for node, (scen, gpus, _) in SCENARIOS.items():
        c.set_scenario(node, scen)
        jobs[node] = c.sbatch("", "-w", node, f"--gres=gpu:{gpus}", "-o", "/dev/null", "--wrap", "sleep 8")
    # while the jobs run: one sampler each, alive although its prolog has exited
    running = {}
    for node, jid in jobs.items():
        c.wait_job(jid, states=("RUNNING",), timeout=60)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(running) < len(jobs):
        for node, jid in jobs.items():
            pids = _sampler_pids(jid)
            if pids:
                running[node] = pids
        time.sleep(0.2)
    assert set(running) == set(jobs), running
    for node, jid in jobs.items():
        c.wait_job(jid, states=("COMPLETED",), timeout=90)
    recs = {node: _wait_record(c, jid) for node, jid in jobs.items()}
    for node, (scen, gpus, verdict) in SCENARIOS.items():
        r = recs[node]
        assert r["verdict"] == verdict, (node, r["verdict"], r["gpus"])
        assert r["node"] == node and len(r["gpus"]) == gpus and r["backend"] == "nvidia-smi"
        assert r["sampler_end"] == "stopped by the epilog"
        assert all(g["samples"] >= 3 for g in r["gpus"])
        # the command a user runs
        res = c.slurmkit("efficiency", str(jobs[node]), "--json")
        doc = json.loads(res.stdout)
        assert doc["verdict"] == verdict and res.returncode == (0 if verdict == "busy" else 1), res.stderr
        text = c.slurmkit("efficiency", str(jobs[node])).stdout
        assert f"verdict: {verdict}" in text
    idle = recs["n3"]
    assert [g["state"] for g in idle["gpus"]] == ["busy", "busy", "busy", "idle"]
    assert any("GPU 3 held 56.6 GiB at 0 %: the job asked for 4 GPUs and used 3" in s for s in idle["next_steps"])
    hung = recs["n4"]
    assert all(g["state"] == "hung" and g["power_limit_w"] == 700 for g in hung["gpus"])
    # DCGM's profiling fields through the sampler's dcgmi dmon child (SYNTHETIC series in eff-busy and eff-hung)
    for node in ("n1", "n4"):
        assert recs[node]["profiling"]["state"] == "ok", recs[node]["profiling"]
        assert all(g["sm_active_mean"] is not None and g["tensor_active_mean"] is not None for g in recs[node]["gpus"])
    assert all(g["sm_active_mean"] < 10 for g in hung["gpus"])
    assert any("utilisation but" in f["text"] and "% SM activity" in f["text"] for f in hung["findings"])
    assert not any("% SM activity" in f["text"] for f in recs["n1"]["findings"])
    # a node whose dcgmi answers nothing useful (eff-underused has no dmon response): sampled all the same, and said
    assert recs["n2"]["profiling"]["state"] == "unavailable" and recs["n2"]["profiling"]["why"]
    # no sampler outlived its job, no sample file left behind
    for jid in jobs.values():
        assert _sampler_pids(jid) == []
    assert not any(_state_dir(c).glob(f"{jobs['n1']}.*"))
    # report idle over the same log, by job: the three wasteful jobs are findings, priced
    res = c.slurmkit("report", "idle", "--since", "1h", "--by", "job", "--json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    groups = {int(g["job"]): g for g in rep["groups"]}
    assert groups[jobs["n3"]]["idle_gpu_hours"] > 0 and groups[jobs["n3"]]["idle_cost"] > 0
    assert groups[jobs["n4"]]["hung_gpu_hours"] > 0 and groups[jobs["n2"]]["underused_gpu_hours"] > 0
    assert groups[jobs["n1"]]["idle_gpu_hours"] == 0
    flagged = {f["job_id"]: f["verdict"] for f in rep["findings"]}
    assert flagged[jobs["n2"]] == "underused" and flagged[jobs["n3"]] == "idle" and flagged[jobs["n4"]] == "hung"
    assert jobs["n1"] not in flagged
    price = rep["price_per_gpu_hour"]
    assert price == 2.5
    g3 = groups[jobs["n3"]]
    assert abs(g3["idle_cost"] - g3["idle_gpu_hours"] * price) < 1e-4
    csv = c.slurmkit("report", "idle", "--since", "1h", "--by", "partition", "--csv").stdout
    assert csv.splitlines()[0].startswith("partition,jobs,gpu_hours,idle_gpu_hours")


def test_sampler_never_outlives_its_job(clean):
    """An epilog that does not stop the sampler (a plain one on n2): the watchdog ends it when the job is gone."""
    c = clean
    plain = c.dir / "hooks" / "epilog.n2"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o755)
    try:
        jid = c.sbatch("", "-w", "n2", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 4")
        c.wait_job(jid, states=("RUNNING",), timeout=60)
        deadline = time.monotonic() + 20
        pids = []
        while time.monotonic() < deadline and not pids:
            pids = _sampler_pids(jid)
            time.sleep(0.2)
        assert pids, "no sampler while the job runs"
        c.wait_job(jid, states=("COMPLETED",), timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.2)
        assert not any(_pid_alive(p) for p in pids), "the sampler outlived its job"
        samples = _state_dir(c) / f"{jid}.n2.samples"
        last = json.loads(samples.read_text().splitlines()[-1])
        assert last.get("why") == "job gone"
    finally:
        plain.unlink()
        for p in _state_dir(c).glob("*.n2.*"):
            p.unlink()


STEPS = ("import sys, time; sys.path.insert(0, {repo!r}); from slurmkit.checkpoint import report_step\n"
         "for _ in range(8):\n    report_step(flops=5e14, tokens=4096); time.sleep(0.4)\n")


def test_cpu_job_has_no_sampler_and_wrap_gpu_job_has_a_record_with_mfu(clean, tmp_path):
    c = clean
    steps_dir = c.dir / "steps"
    steps_dir.mkdir(exist_ok=True)
    script = tmp_path / "steps.py"
    script.write_text(STEPS.format(repo=str(Path(__file__).resolve().parents[2])))
    cpu = c.sbatch("", "-w", "n1", "-o", "/dev/null", "--wrap", "sleep 2")
    gpu = c.sbatch("", "-w", "n1", "--gres=gpu:2", "-o", "/dev/null", f"--export=ALL,SLURMKIT_STEPS_DIR={steps_dir}",
                   "--wrap", f"/usr/bin/python3 {script}")
    c.wait_job(cpu, timeout=60)
    c.wait_job(gpu, timeout=60)
    rec = _wait_record(c, gpu)
    assert rec["verdict"] == "busy" and len(rec["gpus"]) == 2 and rec["user"] == "root"
    m = rec["mfu"]
    # 7 steps of 0.5 PFLOP between the first and last report, ~0.4 s apart, over 2 x H100 SXM (989.4 TFLOP/s)
    assert m["steps"] == 8 and m["flops"] == 7 * 5e14 and m["peak_bf16_dense_tflops_per_gpu"] == 989.4
    assert abs(m["mfu_pct"] - 100 * m["flops"] / m["seconds"] / (2 * 989.4e12)) < 0.01
    assert not (steps_dir / f"slurmkit-steps.{gpu}").exists()      # the epilog consumed it
    text = c.slurmkit("efficiency", str(gpu)).stdout
    assert "MFU:" in text
    time.sleep(2)
    assert _records(c, cpu) == []
    res = c.slurmkit("efficiency", str(cpu))
    assert res.returncode == 1 and "no efficiency record for job" in res.stderr
