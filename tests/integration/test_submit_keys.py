"""The spec keys that are sbatch options of their own (issue 30), on the real dev cluster: an afterok chain of two
jobs (the second waits with Reason=Dependency until the first completes; the same from Python with a Job object),
exclude and nodelist placing the job (its NodeList), a constraint no node has (what real Slurm does with it),
comment and mail visible in `scontrol show job`, mem_per_gpu accepted, setup lines run before the command, and a
GPU type the nodes' Gres lacks refused before sbatch."""
import json
import re
import time
from pathlib import Path

import pytest

from slurmkit import api


def show(cluster, job_id) -> dict[str, str]:
    """`scontrol show job -o` as KEY=VALUE pairs (a value may hold spaces: it runs to the next ` Key=`)."""
    text = cluster.run("scontrol", "show", "job", "-o", str(job_id)).stdout.strip()
    return {k: v.strip() for k, v in re.findall(r"(?:^| )([A-Za-z:/]+)=(.*?)(?= +[A-Za-z:/]+=|$)", text)}


def submit(cluster, tmp_path, text, *sets, check=True):
    p = tmp_path / f"job{len(list(tmp_path.glob('job*.yaml')))}.yaml"
    p.write_text(text)
    args = ["submit", str(p), "--json"]
    for s in sets:
        args += ["--set", s]
    r = cluster.slurmkit(*args)
    if not check:
        return r
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["job_id"]


def wait_for(pred, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what} not met after {timeout}s")


BASE = "partition: gpu\ngpus_per_node: 1\ntime: '10:00'\noutput: {out}/%j.out\n"


@pytest.mark.compat("submit")
def test_an_afterok_chain_waits_for_the_first_job(clean, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    base = BASE.format(out=out)
    first = submit(clean, tmp_path, base + "name: first\ncommand: sleep 6; echo first done\n")
    second = submit(clean, tmp_path, base + f"name: second\ndependency: [{first}]\ncommand: echo second ran\n")
    info = wait_for(lambda: (lambda s: s if s.get("JobState") == "PENDING" else None)(show(clean, second)),
                    what="second job pending")
    assert info["Reason"] == "Dependency" and info["Dependency"].startswith(f"afterok:{first}")
    assert show(clean, first)["JobState"] in ("RUNNING", "PENDING", "CONFIGURING")
    assert clean.wait_job(first, states=("COMPLETED", "FAILED"), timeout=60).state == "COMPLETED"
    assert clean.wait_job(second, states=("COMPLETED", "FAILED"), timeout=60).state == "COMPLETED"
    assert (out / f"{second}.out").read_text() == "second ran\n"


@pytest.mark.compat("submit")
def test_a_python_job_object_is_a_dependency(clean, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = {"partition": "gpu", "gpus_per_node": 1, "time": "10:00", "output": f"{out}/%j.out"}
    client = api.Client(clean.site_config)
    first = client.submit({**spec, "name": "py-first", "command": "sleep 4; exit 3"})
    second = client.submit({**spec, "name": "py-second", "command": "echo never"}, dependency=[first])
    info = show(clean, int(second))
    assert info["Dependency"].startswith(f"afterok:{int(first)}")
    # the first job fails: afterok can never be met, and --kill-on-invalid-dep=yes ends the second job
    assert clean.wait_job(int(first), states=("COMPLETED", "FAILED"), timeout=60).state == "FAILED"
    st = clean.wait_job(int(second), states=("CANCELLED", "COMPLETED", "FAILED"), timeout=60)
    assert st.state == "CANCELLED" and not (out / f"{int(second)}.out").exists()


@pytest.mark.compat("submit")
def test_nodelist_and_exclude_place_the_job(clean, tmp_path):
    base = BASE.format(out=tmp_path) + "command: sleep 1\n"
    on_n2 = submit(clean, tmp_path, base + "name: on-n2\nnodelist: n2\n")
    not_123 = submit(clean, tmp_path, base + "name: not-123\nexclude: 'n[1-2]'\n", "exclude+=n3")
    for j, node in ((on_n2, "n2"), (not_123, "n4")):
        assert clean.wait_job(j, states=("COMPLETED", "FAILED"), timeout=60).state == "COMPLETED"
        assert show(clean, j)["NodeList"] == node
    # a host the cluster does not have is refused before sbatch, with the line
    r = submit(clean, tmp_path, base + "exclude: [n9]\n", check=False)
    assert r.returncode == 2
    assert re.search(r"job\d+\.yaml:6: exclude: n9: not a usable node of partition gpu", r.stderr), r.stderr


@pytest.mark.compat("submit")
def test_a_constraint_no_node_has_is_refused_by_slurm(clean, tmp_path):
    # the dev cluster's nodes have no features (dev/cluster.py writes none): Slurm refuses the request at sbatch
    r = submit(clean, tmp_path, BASE.format(out=tmp_path) + "command: 'true'\nconstraint: 'nvlink&ib'\n", check=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Invalid feature specification" in r.stderr and "sbatch: sbatch:" not in r.stderr


@pytest.mark.compat("submit")
def test_comment_mem_per_gpu_and_setup_reach_the_job(clean, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    comment = "eval of 'b7' #nightly $(touch PWNED)"
    j = submit(clean, tmp_path, BASE.format(out=out).replace("gpus_per_node: 1", "gpus_per_node: 2") +
               f"comment: \"{comment}\"\nmem_per_gpu: 100M\nmail: {{type: [end, fail]}}\n"
               "setup: ['export FROM_SETUP=yes', 'cd /']\n"
               "command: echo \"$FROM_SETUP $PWD\"\n")
    info = show(clean, j)
    assert info["Comment"] == comment and info["MailType"] == "END,FAIL", info
    assert clean.wait_job(j, states=("COMPLETED", "FAILED"), timeout=60).state == "COMPLETED"
    info = show(clean, j)
    # 22.05 and 24.11 print the TRES as gres:gpu, 26.05 as gres/gpu (the TRES name everywhere else)
    assert info.get("MemPerTres") in ("gres:gpu:100", "gres/gpu:100"), info
    assert (out / f"{j}.out").read_text() == "yes /\n"
    assert not (tmp_path / "PWNED").exists() and not Path("/PWNED").exists()


@pytest.mark.compat("submit")
def test_a_gpu_type_the_nodes_gres_lacks_is_refused_before_sbatch(clean, tmp_path):
    # the dev cluster's Gres is gpu:8, no type: a typed request is refused with the line, nothing submitted
    r = submit(clean, tmp_path, BASE.format(out=tmp_path) + "command: 'true'\ngpu_type: h100\n", check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert re.search(r"job\d+\.yaml:6: gpu_type: no node of partition gpu has 1 GPUs of type 'h100' in its Gres; "
                     r"the nodes that fit have untyped GPUs only", r.stderr), r.stderr
