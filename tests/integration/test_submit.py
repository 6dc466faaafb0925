"""`slurmkit submit` on the real dev cluster: each example runs (with a stand-in command that reports what the job
sees), bound jobs see their GPUs and CPUs, a 2-node torchrun-style job agrees on its rendezvous, a sweep of 6 runs
6 array tasks with their own values, and impossible requests are refused before sbatch."""
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from slurmkit.jobs import spec as specmod

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "examples"
KEYS = ["CUDA_VISIBLE_DEVICES", "SLURM_CPUS_ON_NODE", "SLURM_CPUS_PER_TASK", "SLURM_CPU_BIND_LIST",
        "SLURM_CPU_BIND_TYPE", "MASTER_ADDR", "MASTER_PORT", "LR", "SEED", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID",
        "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "HF_HOME", "NCCL_DEBUG", "SLURMKIT_CHECKPOINT_DIR", "SLURM_JOB_NAME"]
PROBE = f"""#!{sys.executable}
# stand-in for the training command: records what the job sees, one JSON file per task
import json, os, sys
e = os.environ
rec = {{"argv": sys.argv[1:], "node": e.get("SLURMD_NODENAME"), "env": {{k: e.get(k) for k in {KEYS!r}}}}}
name = "-".join(e.get(k, "x") for k in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURMD_NODENAME"))
with open(os.path.join(e["PROBE_DIR"], name + ".json"), "w") as f:
    json.dump(rec, f)
"""
# `slurmkit run` is issue 7 (another branch): where it is not installed, this stands in for it, records its
# options, and runs what follows `--`; where it is, the jobs run under the real one
HAVE_RUN = importlib.util.find_spec("slurmkit.commands.run") is not None
WRAPPER = """#!/bin/sh
printf '%s\\n' "$@" > "$PROBE_DIR/wrapper-$SLURM_JOB_ID.args"
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""


@pytest.fixture
def sk(clean, tmp_path):
    """(run, probe_dir): `run(*args)` calls slurmkit with a site config whose `slurmkit run` is the stand-in."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "probe.py").chmod(0o755)
    (tmp_path / "slurmkit-run").write_text(WRAPPER)
    (tmp_path / "slurmkit-run").chmod(0o755)
    site = clean.site_config.read_text()
    assert "slurmkit_bin:" in site
    if not HAVE_RUN:
        site = "\n".join(f"  slurmkit_bin: {tmp_path / 'slurmkit-run'}" if l.strip().startswith("slurmkit_bin:") else l
                         for l in site.splitlines())
    cfg = tmp_path / "site.yaml"
    cfg.write_text(site + "\n")

    def run(*args):
        return clean.slurmkit("--config", str(cfg), *args)
    run.cfg = cfg
    return run, probe_dir, tmp_path


def wait_files(d: Path, pattern: str, n: int, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(d.glob(pattern))
        if len(files) >= n:
            time.sleep(0.3)   # let the last writer close
            return [json.loads(f.read_text()) for f in sorted(d.glob(pattern))]
        time.sleep(0.3)
    raise AssertionError(f"{n} files {pattern} not in {d} after {timeout}s: {sorted(p.name for p in d.iterdir())}")


def submit(run, *args):
    r = run("submit", *args, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert isinstance(out["job_id"], int) and out["script"].startswith("#!/bin/bash\n")
    return out


@pytest.mark.compat("submit")
def test_finetune_example_runs_bound_to_its_gpu_and_cpus(sk):
    run, probe, tmp = sk
    out = submit(run, str(EX / "finetune-1gpu.yaml"), "--set", f"command=[{tmp / 'probe.py'}, --model=x, "
                 "'--output-dir=/scratch/$USER/ft']", "--set", f"env.PROBE_DIR={probe}",
                 "--set", f"checkpoint_dir={tmp / 'ckpt'}", "--set", f"output={tmp}/%x-%j.out")
    (rec,) = wait_files(probe, f"{out['job_id']}-*.json", 1)
    env = rec["env"]
    assert rec["argv"] == ["--model=x", "--output-dir=/scratch/$USER/ft"]     # a list is not shell text
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 1                    # gpus_per_node: 1
    assert env["SLURM_CPUS_ON_NODE"] == "2"                                    # cpus_per_gpu auto: 16 CPUs / 8 GPUs
    assert env["HF_HOME"] == "/scratch/hf-cache" and env["SLURMKIT_CHECKPOINT_DIR"] == str(tmp / "ckpt")
    assert (f"run --signal USR2 --checkpoint-signal TERM --grace 120 --max-requeues 5 --checkpoint-dir {tmp / 'ckpt'}"
            f" -- {tmp / 'probe.py'} --model=x") in out["script"]
    if not HAVE_RUN:
        args = (probe / f"wrapper-{out['job_id']}.args").read_text().split("\n")
        assert args[:11] == ["run", "--signal", "USR2", "--checkpoint-signal", "TERM", "--grace", "120",
                             "--max-requeues", "5", "--checkpoint-dir", str(tmp / "ckpt")]
    assert "#SBATCH --signal=B:USR2@180\n#SBATCH --requeue\n#SBATCH --open-mode=append\n" in out["script"]


def test_whole_node_job_sees_the_gpus_and_cpus_the_profile_bound_it_to(sk, cluster):
    run, probe, tmp = sk
    spec = tmp / "bound.yaml"
    spec.write_text(f"name: bound\npartition: gpu\ngpus_per_node: 8\ntasks_per_node: 2\nlauncher: srun\n"
                    f"command: [{tmp / 'probe.py'}]\nenv: {{PROBE_DIR: {probe}}}\noutput: {tmp}/%x-%j.out\n")
    out = submit(run, str(spec))
    recs = wait_files(probe, f"{out['job_id']}-*.json", 2)
    by_task = {int(r["env"]["SLURM_PROCID"]): r["env"] for r in recs}
    # the plan for the dev profile (2 sockets x 8 cores, GPU0-3 on socket 0, GPU4-7 on socket 1)
    assert by_task[0]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and by_task[1]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    # srun hands every task the mask list; task i takes entry i (the dev cluster runs TaskPlugin=task/none on a
    # 2-core host, so Slurm cannot apply the masks; a real node's task/affinity does)
    for i, mask in ((0, "ff"), (1, "ff00")):
        assert by_task[i]["SLURM_CPU_BIND_TYPE"].startswith("mask_cpu")
        assert by_task[i]["SLURM_CPU_BIND_LIST"].split(",")[i] == mask
    assert by_task[0]["SLURM_CPUS_PER_TASK"] == "8" and by_task[0]["SLURM_CPUS_ON_NODE"] == "16"


@pytest.mark.compat("submit")
def test_two_node_torchrun_example_agrees_on_the_rendezvous(sk):
    run, probe, tmp = sk
    out = submit(run, str(EX / "torchrun-2node.yaml"), "--set", f"torchrun.bin={tmp / 'probe.py'}",
                 "--set", f"env.PROBE_DIR={probe}", "--set", f"checkpoint_dir={tmp / 'ckpt'}",
                 "--set", f"output={tmp}/%x-%j.out")
    recs = wait_files(probe, f"{out['job_id']}-*.json", 2)
    assert len(recs) == 2 and len({r["node"] for r in recs}) == 2, recs   # one launcher on each of two nodes
    addrs = {(r["env"]["MASTER_ADDR"], r["env"]["MASTER_PORT"]) for r in recs}
    assert len(addrs) == 1, addrs                                   # the same rendezvous on both nodes
    (addr, port), = addrs
    first = min(r["node"] for r in recs)
    assert addr == first and 20000 <= int(port) < 40000             # the first node of the allocation
    for r in recs:
        assert r["argv"][:5] == ["--nnodes=2", "--nproc-per-node=8", f"--rdzv-id={out['job_id']}",
                                 "--rdzv-backend=c10d", f"--rdzv-endpoint={addr}:{port}"]
        assert r["argv"][5:] == ["train.py", "--config", "configs/pretrain.yaml", "--batch-size", "32"]
        assert r["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and r["env"]["NCCL_DEBUG"] == "WARN"
        assert r["env"]["SLURM_CPU_BIND_LIST"] in ("ffff", "0xffff")            # the whole node, from the profile


@pytest.mark.compat("submit")
def test_sweep_example_runs_six_array_tasks_with_their_own_values(sk):
    run, probe, tmp = sk
    out = submit(run, str(EX / "sweep.yaml"), "--set", f'command={tmp / "probe.py"} --lr "$LR" --seed "$SEED"',
                 "--set", f"env.PROBE_DIR={probe}", "--set", f"output={tmp}/%x-%A_%a.out")
    assert "#SBATCH --array=0-5%3\n" in out["script"]
    recs = wait_files(probe, "*.json", 6)
    assert {r["env"]["SLURM_ARRAY_JOB_ID"] for r in recs} == {str(out["job_id"])}
    grid = specmod.load(str(EX / "sweep.yaml")).sweep_grid()
    seen = {}
    for r in recs:
        e = r["env"]
        seen[int(e["SLURM_ARRAY_TASK_ID"])] = {"LR": e["LR"], "SEED": e["SEED"]}
        assert r["argv"] == ["--lr", e["LR"], "--seed", e["SEED"]]
    assert seen == dict(enumerate(grid)) and len(grid) == 6


@pytest.mark.compat("submit")
def test_more_gpus_than_a_node_has_is_refused_before_submission(sk, cluster):
    run, probe, tmp = sk
    spec = tmp / "big.yaml"
    spec.write_text("name: big\ngpus_per_node: 9\ncommand: [true]\n")   # no partition: the cluster check decides
    r = run("submit", str(spec))
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr == (f"slurmkit: error: {spec}:2: gpus_per_node: 9 GPUs per node requested, but the nodes of the "
                        "cluster have at most 8; refused before submission\n")
    r = run("submit", str(EX / "sweep.yaml"), "--set", "partition=gpus")
    assert r.returncode == 2
    assert r.stderr == "slurmkit: error: --set partition: 'gpus' does not exist on this cluster; did you mean 'gpu'?\n"
    r = run("submit", str(EX / "finetune-1gpu.yaml"), "--set", "gpus_per_node=9")    # the profile knows too
    assert r.returncode == 2 and r.stderr.startswith("slurmkit: error: --set gpus_per_node: 9 GPUs per node, but "
                                                     "the nodes of partition gpu have 8 (topology profile")
    assert cluster.run("squeue", "-h", "-o", "%i").stdout.strip() == ""            # nothing reached Slurm


def test_dry_run_and_a_hostile_name_survive_sbatch(sk, cluster):
    run, probe, tmp = sk
    spec = tmp / "odd.yaml"
    name = "it's a \"job\" #1 $(touch /tmp/pwned) `id`"
    spec.write_text(f"name: {json.dumps(name)}\ncommand: [true]\ngpus_per_node: 0\noutput: {tmp}/o-%j.out\n")
    r = run("submit", str(spec), "--dry-run")
    assert r.returncode == 0 and r.stdout.startswith("#!/bin/bash\n") and "dry run" in r.stderr
    assert cluster.run("squeue", "-h", "-o", "%i").stdout.strip() == ""
    r = run("submit", str(spec))
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip())
    rec = cluster.wait_job(job, states=("COMPLETED", "FAILED"))
    assert rec.state == "COMPLETED" and rec.name == name


@pytest.mark.parametrize("value", ["a\\b c", "ends with \\", "it's \\' # not a comment", "\\\\server\\share"])
def test_backslashes_in_sbatch_values_reach_slurm_as_written(sk, cluster, value):
    """sbatch's #SBATCH parser takes a backslash as an escape even inside quotes, and a trailing one aborted it
    (issue 17 W5): the job name and a --comment extra come back from Slurm byte for byte."""
    run, probe, tmp = sk
    spec = tmp / "bs.yaml"
    spec.write_text(json.dumps({"name": value, "command": ["true"], "gpus_per_node": 0,
                                "output": f"{tmp}/o-%j.out", "sbatch": [f"--comment={value}"]}))
    r = run("submit", str(spec), "--no-check")
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip())
    rec = cluster.wait_job(job, states=("COMPLETED", "FAILED"))
    assert rec.name == value
    show = cluster.run("scontrol", "show", "job", str(job)).stdout
    assert f"Comment={value}" in show, show
