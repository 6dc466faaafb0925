"""slurmkit.submit() on the real dev cluster: one Python process submits N jobs that run with their own values,
the cluster's nodes are asked once (until refresh), and a bad spec or an impossible request raises SpecError with
the file and line before anything reaches Slurm."""
import time
from pathlib import Path

import pytest

import slurmkit
from slurmkit import api
from slurmkit.errors import SpecError

N = 6


def wait_files(d: Path, n: int, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(d.glob("*.out"))
        if len(files) >= n:
            return files
        time.sleep(0.3)
    raise AssertionError(f"{n} files not in {d} after {timeout}s: {sorted(p.name for p in d.iterdir())}")


@pytest.mark.compat("submit")
def test_one_process_submits_n_jobs_and_they_run_with_their_values(clean, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = tmp_path / "probe.yaml"
    spec.write_text("name: api-probe\npartition: gpu\ngpus_per_node: 1\ntime: '10:00'\n"
                    f"command: echo \"$RUN $CUDA_VISIBLE_DEVICES\" > {out}/$SLURM_JOB_ID.out\n"
                    "output: /dev/null\n")
    client = api.Client(clean.site_config)
    ids = [client.submit(spec, env={"RUN": f"run-{i}"}) for i in range(N)]
    assert len(set(ids)) == N and all(isinstance(j, slurmkit.Job) and int(j) == j for j in ids)
    for j in ids:
        assert clean.wait_job(j, states=("COMPLETED", "FAILED"), timeout=120).state == "COMPLETED"
    files = wait_files(out, N)
    seen = {int(f.stem): f.read_text().split() for f in files}
    assert {j: seen[j][0] for j in ids} == {j: f"run-{i}" for i, j in enumerate(ids)}
    assert all(len(seen[j]) == 2 for j in ids)                  # each job saw its one GPU
    # the cluster's nodes were asked once for all N submissions, and again after refresh()
    first = client.cluster_nodes()
    assert client.cluster_nodes() is first and {r.name for r in first} == {"n1", "n2", "n3", "n4"}
    client.refresh()
    assert client.cluster_nodes() is not first


@pytest.mark.compat("submit")
def test_bad_specs_raise_with_file_and_line_and_nothing_is_submitted(clean, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CONFIG", str(clean.site_config))
    api.refresh()
    big = tmp_path / "big.yaml"
    big.write_text("name: big\ncommand: [true]\ngpus_per_node: 9\n")   # no partition: the cluster check decides
    with pytest.raises(SpecError) as e:
        slurmkit.submit(big)
    assert (e.value.path, e.value.line) == (str(big), 3)
    assert str(e.value) == (f"{big}:3: gpus_per_node: 9 GPUs per node requested, but the nodes of the cluster have "
                            "at most 8; refused before submission")
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: t\ncommand: [true]\n\npartition: gpus\n")
    with pytest.raises(SpecError) as e:
        slurmkit.submit(typo)
    assert (e.value.path, e.value.line) == (str(typo), 4) and "did you mean 'gpu'?" in str(e.value)
    with pytest.raises(SpecError) as e:
        slurmkit.submit({"command": ["true"], "nodes": 5, "partition": "gpu"})
    assert e.value.path == "<dict>" and "5 nodes requested, but partition gpu has 4" in str(e.value)
    assert clean.run("squeue", "-h", "-o", "%i").stdout.strip() == ""            # nothing reached Slurm


@pytest.mark.compat("submit")
def test_the_cli_resubmits_and_checks_the_live_cluster_every_time(clean, tmp_path):
    """`slurmkit submit` of the same spec again asks the cluster every time: a node that failed since the last
    submission is seen, and the request refused with the spec's file."""
    import json
    import sys
    spec = tmp_path / "four.yaml"
    spec.write_text("name: four\npartition: gpu\nnodes: 4\ngpus_per_node: 1\ntime: '10:00'\ncommand: [true]\n"
                    "output: /dev/null\nsbatch: [--hold]\n")
    env = dict(clean.env, XDG_CACHE_HOME=str(tmp_path / "cache"))

    def submit():
        return clean.run(sys.executable, "-m", "slurmkit", "submit", "--json", str(spec), check=False, env=env)
    first, second = submit(), submit()
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["script"] == b["script"] and a["job_id"] != b["job_id"]
    queued = clean.run("squeue", "-h", "-o", "%i").stdout.split()
    assert {str(a["job_id"]), str(b["job_id"])} <= set(queued)
    clean.run("scontrol", "update", "NodeName=n4", "State=FAIL", "Reason=test_submit_api")
    try:
        r = submit()
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == (f"slurmkit: error: {spec}:3: nodes: 4 nodes requested, but partition gpu has 3 with 1 "
                            "GPUs or more; refused before submission\n")
    finally:
        clean.run("scontrol", "update", "NodeName=n4", "State=RESUME", check=False)
