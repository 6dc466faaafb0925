import json
import time
from datetime import datetime

import pytest

from slurmkit.errors import CommandError
from slurmkit.slurm.cli_backend import CliBackend, SlurmError


def test_submitted_job_completes_and_sees_its_gpus(clean, tmp_path):
    out = tmp_path / "out.txt"
    job = clean.sbatch("#!/bin/sh\necho node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES\n",
                       "--gpus-per-node=2", f"--output={out}")
    rec = clean.wait_job(job, states=("COMPLETED", "FAILED", "CANCELLED"))
    assert rec.state == "COMPLETED", rec
    text = out.read_text()
    assert text.startswith("node=n") and "gpus=0,1" in text


@pytest.mark.compat("nodes", "drain/resume")
def test_drain_shows_reason_user_and_time_then_resume(clean):
    reason = "slurmkit:test operator drill"
    before = datetime.now().replace(microsecond=0)
    clean.backend.drain("n2", reason)
    r = clean.slurmkit("nodes", "--json")
    assert r.returncode == 0, r.stderr
    nodes = {n["name"]: n for n in json.loads(r.stdout)["nodes"]}
    n2 = nodes["n2"]
    assert "DRAIN" in n2["flags"] and n2["reason"] == reason and n2["reason_user"] == "root"
    when = datetime.fromisoformat(n2["reason_time"])
    assert abs((when - before).total_seconds()) < 60
    assert all(not nodes[n]["flags"] for n in ("n1", "n3", "n4"))
    assert nodes["n1"]["gpus_total"] == 8
    # the human table shows the same
    table = clean.slurmkit("nodes").stdout
    assert any(line.startswith("n2") and "idle+drain" in line and reason in line for line in table.splitlines())

    clean.backend.resume("n2")
    rec = clean.wait_node("n2", lambda r: not r.flags)
    # measured: 24.11 and 25.11 keep the old reason on the resumed idle node, 22.05 and 26.05 clear it
    assert rec.state == "IDLE" and rec.reason == (reason if clean.slurm in ("24.11", "25.11") else "")


@pytest.mark.compat("nodes")
def test_nodes_shows_gpus_in_use(clean):
    job = clean.sbatch("#!/bin/sh\nsleep 30\n", "--gpus-per-node=3", "-w", "n3", "--output=/dev/null")
    clean.wait_job(job, states=("RUNNING",))
    n3 = {n["name"]: n for n in json.loads(clean.slurmkit("nodes", "n[3-4]", "--json").stdout)["nodes"]}
    assert set(n3) == {"n3", "n4"}
    assert n3["n3"]["gpus_used"] == 3 and n3["n3"]["state"] == "MIXED"


def test_requeue_a_running_job(clean, tmp_path):
    out = tmp_path / "runs.txt"
    job = clean.sbatch(f"#!/bin/sh\necho start >> {out}\nsleep 60\n", "--requeue", "--output=/dev/null")
    clean.wait_job(job, states=("RUNNING",))
    # RUNNING in slurmctld comes before the batch script is launched on the node: wait for the script itself
    deadline = time.monotonic() + 30
    while not (out.exists() and "start" in out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert out.read_text().count("start") == 1
    clean.backend.requeue(job, start_now=True)
    rec = clean.wait_job(job, states=("RUNNING",), timeout=30)
    assert rec.restarts == 1
    deadline = time.monotonic() + 30
    while out.read_text().count("start") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert out.read_text().count("start") == 2
    clean.backend.cancel(job)


def test_missing_sbatch_is_a_clear_error(cluster, tmp_path):
    b = CliBackend(timeout=5, bin_dir=str(tmp_path))   # a directory with no Slurm tools in it
    with pytest.raises(SlurmError) as e:
        b.submit("#!/bin/sh\ntrue\n")
    assert "sbatch: command not found" in str(e.value)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"slurm:\n  bin_dir: {tmp_path}\n")
    r = cluster.slurmkit("--config", str(cfg), "nodes")
    # a Slurm tool that is not there did not answer: could not find out (3), not "unhealthy" (1)
    assert r.returncode == 3 and "sinfo: command not found" in r.stderr and "Traceback" not in r.stderr


def test_controller_down_fails_clearly_within_the_timeout(cluster, tmp_path):
    # the same cluster config, but pointing at a port where no slurmctld listens
    text = cluster.conf.read_text()
    dead = "\n".join("SlurmctldPort=6999" if l.startswith("SlurmctldPort=") else l for l in text.splitlines())
    conf = tmp_path / "slurm.conf"
    conf.write_text(dead + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("slurm:\n  timeout: 3\n")
    env = dict(cluster.env, SLURM_CONF=str(conf))
    start = time.monotonic()
    r = cluster.slurmkit("--config", str(cfg), "nodes", env=env)
    took = time.monotonic() - start
    assert r.returncode == 3   # could not find out (issue 35)
    # 23.02+ list nodes with scontrol --json, older with sinfo --json: the error names the tool that failed
    assert ("sinfo" in r.stderr or "scontrol" in r.stderr) and (
        "timed out after 3s" in r.stderr or "controller" in r.stderr)
    assert "Traceback" not in r.stderr
    assert took < 3 + 5   # the command's timeout plus interpreter start and the kill grace


def test_bad_config_exits_2_with_file_and_line(cluster, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("slurm:\n  timeout: 3\n  bakend: cli\n")
    r = cluster.slurmkit("--config", str(cfg), "nodes")
    assert r.returncode == 2
    assert r.stderr.strip() == f"slurmkit: error: {cfg}:3: unknown key 'slurm.bakend'; did you mean 'backend'?"
