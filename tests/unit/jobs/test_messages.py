"""What a user reads (issue 30, item 6 and the launchers of item 4): `-v` after a subcommand, `--set container`
errors that name --set, the examples' list commands, render's final newline, a second checkpoint writer, and
MASTER_ADDR/MASTER_PORT in every multi-node job whatever its launcher."""
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from slurmkit import checkpoint
from slurmkit.jobs import spec as specmod

from clirun import run_cli

REPO = Path(__file__).resolve().parents[3]
SITE = REPO / "tests" / "golden" / "submit" / "site.yaml"
EX = REPO / "examples"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def render(tmp_path, spec: dict, *extra, site=SITE):
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(spec))
    return run_cli(["--config", str(site), "render", str(p), *extra])


def test_verbose_after_the_subcommand_is_the_same_as_before_it():
    rc, out, err = run_cli(["--config", str(SITE), "render", str(EX / "finetune-1gpu.yaml"), "-v"])
    assert rc == 0 and "slurmkit: template single.sbatch.j2" in err
    assert out == run_cli(["--config", str(SITE), "-v", "render", str(EX / "finetune-1gpu.yaml")])[1]


def test_render_output_ends_with_a_newline():
    rc, out, _ = run_cli(["--config", str(SITE), "render", str(EX / "sweep.yaml")])
    assert rc == 0 and out.endswith("\n") and not out.endswith("\n\n")


def test_set_container_on_a_site_without_containers_names_set_not_the_spec_file(tmp_path):
    text = SITE.read_text().replace("containers: true", "containers: false")
    text = text.replace("[site-templates]", f"[{SITE.parent / 'site-templates'}]")
    text = text.replace("../../../dev/", f"{REPO / 'dev'}/")
    site = tmp_path / "site.yaml"
    site.write_text(text)
    rc, _, err = run_cli(["--config", str(site), "render", str(EX / "finetune-1gpu.yaml"),
                          "--set", "container={image: nvcr.io/x}"])
    assert rc == 2
    assert err.startswith("slurmkit: error: --set container.image: this site runs no container plugin"), err
    assert "finetune-1gpu.yaml" not in err


def test_set_container_mapping_missing_its_image_says_so():
    rc, _, err = run_cli(["--config", str(SITE), "render", str(EX / "finetune-1gpu.yaml"),
                          "--set", "container={mounts: [/data:/data]}"])
    assert rc == 2 and "missing key 'container.image'" in err and "got a mapping" not in err, err


def test_examples_pass_no_shell_variables_in_list_commands():
    # a list command reaches the program as written: `$USER` in one would be a literal directory name
    for p in EX.glob("*.yaml"):
        cmd = yaml.safe_load(p.read_text()).get("command")
        if isinstance(cmd, list):
            assert not [a for a in cmd if re.search(r"\$\{?[A-Za-z_]", str(a))], p.name


def test_docs_submit_cites_no_issue_numbers():
    assert not re.search(r"\(issue \d+\)", (REPO / "docs" / "submit.md").read_text())


@pytest.mark.parametrize("launcher", ["none", "srun", "torchrun", "accelerate", "deepspeed"])
def test_every_multi_node_job_exports_master_addr_and_port(tmp_path, launcher):
    spec = {"name": "mn", "partition": "gpu", "nodes": 2, "gpus_per_node": 2, "launcher": launcher,
            "command": ["train.py", "--x"]}
    rc, out, err = render(tmp_path, spec)
    assert rc == 0, err
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in out
    assert "export MASTER_ADDR MASTER_PORT" in out
    assert " run --signal" not in out             # no checkpoint_dir, no wrapper: MASTER_ADDR does not need it
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0


def test_single_node_plain_job_has_no_rendezvous(tmp_path):
    rc, out, _ = render(tmp_path, {"name": "one", "gpus_per_node": 1, "command": "python t.py"})
    assert rc == 0 and "MASTER_ADDR" not in out


def run_launch(tmp_path, script: str, nodeid: int, procid: int, ntasks: int) -> list[str]:
    """Run the script's launch line with stub srun/scontrol/accelerate/python on PATH (no cluster needed for
    what the launcher is given): each stub prints its argv and the rank variables."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho nodeA\necho nodeB\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n")
    for tool in ("accelerate", "python"):
        (bin_dir / tool).write_text(
            "#!/bin/sh\necho \"$(basename $0) MASTER=$MASTER_ADDR:$MASTER_PORT RANK=$RANK LOCAL_RANK=$LOCAL_RANK "
            "WORLD_SIZE=$WORLD_SIZE\"\nfor a in \"$@\"; do echo \"arg:$a\"; done\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node[A-B]", "SLURM_JOB_ID": "77",
           "SLURM_NODEID": str(nodeid), "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid % 2),
           "SLURM_NTASKS": str(ntasks), "SLURM_NNODES": "2"}
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_accelerate_gets_the_rendezvous_and_the_argv_untouched(tmp_path):
    spec = {"name": "acc", "partition": "gpu", "nodes": 2, "gpus_per_node": 4, "launcher": "accelerate",
            "command": ["train.py", "--name", "it's $HOME"]}
    rc, out, err = render(tmp_path, spec)
    assert rc == 0, err
    lines = run_launch(tmp_path, out, nodeid=1, procid=1, ntasks=2)
    assert lines[0] == "accelerate MASTER=nodeA:20077 RANK= LOCAL_RANK= WORLD_SIZE="
    args = [a[4:] for a in lines[1:]]
    assert args[:2] == ["launch", "--num_machines=2"] and "--num_processes=8" in args and "--multi_gpu" in args
    assert "--machine_rank=1" in args and "--main_process_ip=nodeA" in args and "--main_process_port=20077" in args
    assert args[-3:] == ["train.py", "--name", "it's $HOME"]


def test_deepspeed_runs_one_rank_per_gpu_with_the_variables_it_reads(tmp_path):
    spec = {"name": "ds", "partition": "gpu", "nodes": 2, "gpus_per_node": 2, "launcher": "deepspeed",
            "command": ["train.py", "--deepspeed_config", "ds.json"]}
    rc, out, err = render(tmp_path, spec)
    assert rc == 0, err
    assert "#SBATCH --ntasks-per-node=2\n" in out
    lines = run_launch(tmp_path, out, nodeid=1, procid=3, ntasks=4)
    assert lines[0] == "python MASTER=nodeA:20077 RANK=3 LOCAL_RANK=1 WORLD_SIZE=4"
    assert [a[4:] for a in lines[1:]] == ["-u", "train.py", "--deepspeed_config", "ds.json"]


@pytest.mark.parametrize("launcher,key", [("accelerate", "gpus_per_node"), ("deepspeed", "gpus_per_node")])
def test_gpu_launchers_need_gpus(launcher, key):
    with pytest.raises(specmod.SpecError, match=f"{key}: launcher {launcher} starts one process per GPU"):
        specmod.loads(f"launcher: {launcher}\ngpus_per_node: 0\ncommand: t.py\n", "job.yaml")


def test_a_second_writer_in_the_same_directory_is_named_not_errno_39(tmp_path, monkeypatch):
    # the race: the other writer's rename lands between this save's check for an existing step and its rename
    ck = tmp_path / "ck"
    real = os.path.lexists
    raced = []

    def lexists(p):
        if str(p).endswith(checkpoint.name_for(5)) and not raced:
            raced.append(p)
            checkpoint.save(str(ck), 5, lambda d: Path(d, "other").write_text("x"))   # the other writer wins
            return False
        return real(p)

    monkeypatch.setattr(checkpoint.os.path, "lexists", lexists)
    with pytest.raises(OSError, match="another process saves into the same directory") as e:
        checkpoint.save(str(ck), 5, lambda d: Path(d, "mine").write_text("y"))
    assert "one writer per directory" in str(e.value)
    assert [p.name for p in ck.iterdir()] == [checkpoint.name_for(5)]      # no .tmp- left behind
