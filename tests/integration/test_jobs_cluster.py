"""The job handle and `slurmkit jobs/logs/cancel` on the real dev cluster (issue 30): submit() returns a Job that
waits and reports its exit code and output; array tasks; as_completed; a cluster without accounting said once; a
munge the user may not reach and an sbatch refusal said by their cause; accelerate/deepspeed jobs that get the
rendezvous without checkpoint_dir; and `slurmkit cancel --preempt` on a checkpointing job, which is requeued and
resumes from its checkpoint.

A requeued job sits PENDING (Reason=BeginTime) ~120 s before Slurm starts it again; as in test_run_requeue.py the
TEST shortens that from outside with `scontrol update JobId=.. StartTime=now+2`. Nothing else is helped.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import slurmkit
from slurmkit import api
from slurmkit.jobs.handle import JobGone, Slurm
from slurmkit.slurm.jobs import run_events

TOY = Path(__file__).resolve().parents[1] / "toy_train.py"
PY = sys.executable


@pytest.fixture
def request_cleanup():
    fns = []
    yield fns
    for fn in fns:
        fn()


def client(cluster):
    return api.Client(cluster.site_config)


@pytest.mark.compat("submit")
def test_submit_returns_a_job_that_waits_and_reports_exit_code_and_output(clean, tmp_path):
    out = tmp_path / "job-%j.out"
    job = client(clean).submit({"name": "handle-probe", "partition": "gpu", "gpus_per_node": 1,
                                "command": "echo hello from $SLURM_JOB_ID; sleep 2; exit 3", "output": str(out)})
    assert isinstance(job, slurmkit.Job) and int(job) == job and clean.job_state(int(job)) in (
        "PENDING", "RUNNING", "COMPLETED", "FAILED")
    assert job.wait(timeout=120) == "FAILED"
    assert job.done() and job.exit_code == 3 and job.restarts == 0
    assert job.stdout_path == str(tmp_path / f"job-{int(job)}.out")
    assert job.tail(5) == [f"hello from {int(job)}"]
    st = job.status()
    assert (st.nodes, st.gpus, st.name) != ("", 0, "") and st.name == "handle-probe"
    listed = {j.id: j for j in client(clean).jobs(name="handle-probe")}
    assert job.id in listed and listed[job.id].status(refresh=False).state == "FAILED"


@pytest.mark.compat("submit")
def test_array_tasks_and_as_completed(clean, tmp_path):
    job = client(clean).submit({"name": "handle-sweep", "partition": "gpu", "gpus_per_node": 1,
                                "command": "sleep $S; exit $E", "sweep": {"S": ["3", "1"], "E": ["0"]},
                                "output": str(tmp_path / "%A_%a.out")})
    tasks = job.tasks()
    assert [t.id for t in tasks] == [f"{int(job)}_0", f"{int(job)}_1"] and job.is_array()
    order = [t.id for t in slurmkit.as_completed(tasks, timeout=120)]
    assert sorted(order) == sorted(t.id for t in tasks)
    assert job.wait(timeout=30) == "COMPLETED" and job.exit_code == 0
    assert all(t.exit_code == 0 for t in tasks)


def test_no_accounting_is_said_once_and_a_forgotten_job_is_not_guessed(clean, monkeypatch):
    monkeypatch.setattr(Slurm, "no_accounting", set())
    said = []
    s = Slurm(timeout=15, say=said.append)
    assert s.sacct("1") == [] and s.sacct("2") == []           # the dev cluster: accounting_storage/none
    assert len(said) == 1 and "keeps no job accounting" in said[0]
    with pytest.raises(JobGone, match="keeps no accounting, so its end state cannot be known"):
        slurmkit.Job(987654, slurm=s).state()


def test_cli_jobs_logs_and_cancel(clean, tmp_path):
    job = client(clean).submit({"name": "cli-probe", "partition": "gpu", "gpus_per_node": 2,
                                "command": "for i in 1 2 3 4; do echo line $i; sleep 1; done",
                                "output": str(tmp_path / "o.out")})
    r = clean.slurmkit("logs", str(int(job)), "-f", "--max-wait", "90", timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-4:] == ["line 1", "line 2", "line 3", "line 4"]
    r = clean.slurmkit("logs", job.id, "-n", "2", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"id": job.id, "path": str(tmp_path / "o.out"),
                                                          "lines": ["line 3", "line 4"]}, r.stderr
    r = clean.slurmkit("jobs", "--json", "--name", "cli-probe")
    assert r.returncode == 0, r.stderr
    row = next(x for x in json.loads(r.stdout)["jobs"] if x["id"] == job.id)
    assert (row["id"], row["state"], row["gpus"], row["exit_code"]) == (job.id, "COMPLETED", 2, 0)
    r = clean.slurmkit("jobs")
    assert r.returncode == 0 and "cli-probe" in r.stdout and r.stdout.startswith("JOBID")
    # cancel by name: a dry run changes nothing, then the job ends CANCELLED
    long = client(clean).submit({"name": "cli-cancel", "partition": "gpu", "gpus_per_node": 1,
                                 "command": "sleep 300", "output": "/dev/null"})
    t0 = time.monotonic()
    r = clean.slurmkit("logs", long.id, "-f", "--max-wait", "3")          # following is bounded
    assert r.returncode == 1 and "still " in r.stderr and "stopped following" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 30
    r = clean.slurmkit("cancel", "--name", "cli-cancel", "--dry-run", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["commands"] == [["scancel", long.id]]
    assert not long.done()
    r = clean.slurmkit("cancel", "--name", "cli-cancel")
    assert r.returncode == 0 and r.stdout == f"scancel {long.id}\n", r.stderr
    assert long.wait(timeout=60) == "CANCELLED"
    r = clean.slurmkit("logs", "999999")
    assert r.returncode == 3 and "slurmctld no longer knows it" in r.stderr


def test_sbatch_refusal_is_said_once_without_its_prefix(clean, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\npartition: nosuchpart\ngpus_per_node: 1\ncommand: [true]\n")
    r = clean.slurmkit("submit", "--no-check", str(spec))
    assert r.returncode == 1
    assert r.stderr == ("slurmkit: error: sbatch: Batch job submission failed: Invalid partition name specified\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user (nobody)")
def test_munge_this_user_may_not_reach_is_said_as_such_exit_3(clean, tmp_path, request_cleanup):
    # the dev cluster's munge socket sits in a 0700 root directory: user nobody gets "Permission denied"
    # the venv's interpreter lives under /root (0700): nobody runs the system python3 with the venv's packages
    repo = Path(__file__).resolve().parents[2]
    site = next(repo.glob(".venv/lib/python3*/site-packages"))
    py = "/usr/bin/python3"
    if not os.path.exists(py) or not site.name or sys.version_info[:2] != (3, 11):
        pytest.skip("needs /usr/bin/python3 of the venv's Python version")
    env = dict(clean.env, SLURMKIT_NO_CACHE="1", HOME=str(tmp_path), PYTHONPATH=f"{repo}:{site}")
    import shutil
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="sk-munge-"))      # pytest's tmp_path is under a 0700 directory
    request_cleanup.append(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o755)
    spec = shared / "j.yaml"
    spec.write_text("name: j\npartition: gpu\ngpus_per_node: 1\ncommand: [true]\n")
    spec.chmod(0o644)
    env["HOME"] = str(shared)
    for args in (["jobs"], ["submit", str(spec)], ["cancel", "1"]):
        r = clean.run("runuser", "-u", "nobody", "--", "env", *[f"{k}={v}" for k, v in env.items()], py, "-m",
                      "slurmkit.cli", *args, check=False)
        assert r.returncode == 3, (args, r.stderr)
        assert "cannot reach munge at " in r.stderr and "Permission denied" in r.stderr, (args, r.stderr)
        assert "Unspecified error" not in r.stderr


def stubs(tmp_path: Path) -> Path:
    """accelerate and python stand-ins that print what they were given (the rendezvous, the ranks, the argv)."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("accelerate", "python"):
        p = d / tool
        p.write_text("#!/bin/sh\necho \"$(basename $0) node=$SLURMD_NODENAME master=$MASTER_ADDR:$MASTER_PORT "
                     "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE args=$*\"\n")
        p.chmod(0o755)
    return d


@pytest.mark.parametrize("launcher", ["accelerate", "deepspeed"])
def test_two_node_launchers_get_the_rendezvous_without_checkpoint_dir(clean, tmp_path, monkeypatch, launcher):
    monkeypatch.setenv("PATH", f"{stubs(tmp_path)}:{os.environ['PATH']}")     # sbatch exports it to the job
    out = tmp_path / "o.out"
    job = client(clean).submit({"name": f"mn-{launcher}", "partition": "gpu", "nodes": 2, "gpus_per_node": 1,
                                "launcher": launcher, "command": ["train.py", "--x", "1"], "output": str(out)})
    assert job.wait(timeout=120) == "COMPLETED", out.read_text() if out.exists() else ""
    lines = sorted(ln for ln in out.read_text().splitlines() if ln.startswith(("accelerate", "python")))
    port = 20000 + int(job) % 20000
    assert len(lines) == 2 and all(f"master=n1:{port} " in ln for ln in lines), lines
    if launcher == "accelerate":
        assert "--machine_rank=0" in lines[0] + lines[1] and "--machine_rank=1" in lines[0] + lines[1]
        assert all("--num_machines=2 --num_processes=2 --multi_gpu" in ln and ln.endswith("train.py --x 1")
                   for ln in lines)
    else:
        assert {ln.split(" rank=")[1].split()[0] for ln in lines} == {"0", "1"}
        assert all(" world=2 " in ln and ln.endswith("args=-u train.py --x 1") for ln in lines)


def uninterrupted(tmp_path: Path, target: int) -> str:
    ck = tmp_path / "reference"
    out = subprocess.run([PY, str(TOY), str(ck), str(target), "0", "10"], capture_output=True, text=True,
                         check=True, timeout=60, env=dict(os.environ, SLURMKIT_STOP_FILE=""))
    return out.stdout.strip().splitlines()[-1].split("value=")[1]


@pytest.mark.slow
@pytest.mark.compat("run/requeue")
def test_cancel_preempt_requeues_and_the_job_resumes_from_its_checkpoint(clean, tmp_path):
    target = 150
    ck, out = tmp_path / "ck", tmp_path / "job.out"
    job = client(clean).submit({
        "name": "preempt-probe", "partition": "gpu", "gpus_per_node": 1, "time": "1:00:00",
        "command": [PY, str(TOY), str(ck), str(target), "0.2", "10"], "output": str(out),
        "checkpoint_dir": str(ck), "preemption": {"grace": 15, "max_requeues": 3}})
    deadline = time.monotonic() + 120
    while not list(ck.glob("step-*")):                               # the first checkpoint is written
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.3)
    r = clean.slurmkit("cancel", "--preempt", job.id)
    assert r.returncode == 0 and r.stdout == f"scancel --batch --signal=USR2 {job.id}\n", r.stderr
    # drive to the end, shortening Slurm's BeginTime hold after the requeue (module docstring)
    deadline, shortened = time.monotonic() + 240, False
    while not job.done():
        st = job.status()
        if st.state == "PENDING" and st.reason == "BeginTime" and not shortened:
            clean.run("scontrol", "update", f"JobId={job.id}", "StartTime=now+2", check=False)
            shortened = True
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.5)
    text = out.read_text()
    assert job.state() == "COMPLETED" and job.restarts == 1, text
    events = [e["event"] for e in run_events(text)]
    assert "requeued" in events and "resumed" in events, text
    requeued = next(e for e in run_events(text) if e["event"] == "requeued")
    assert requeued["kind"] == "preemption"                      # early in a 1-hour limit: a preemption
    resumed = [ln for ln in text.splitlines() if ln.startswith("toy: resumed step=")]
    assert resumed and int(resumed[0].split("=")[1]) >= 10, text
    assert f"toy: done step={target} value={uninterrupted(tmp_path, target)}\n" in text   # as if never stopped
    r = clean.slurmkit("jobs", "--json", "--name", "preempt-probe")
    row = next(x for x in json.loads(r.stdout)["jobs"] if x["id"] == job.id)
    assert row["restarts"] == 1 and row["event"].startswith("child-exit code=0"), row
