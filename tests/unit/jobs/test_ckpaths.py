"""Issue 29: checkpoint paths per job and per array task: placeholders, $VARIABLEs, a sweep's tasks never sharing
one directory, and what `render` shows."""
import pytest

from slurmkit.errors import UsageError
from slurmkit.jobs import render, spec as specmod
from slurmkit.jobs.ckpaths import PathError, expand, per_task_default, problems

from sitesettings import make_settings

TASK3 = {"SLURM_JOB_ID": "1207", "SLURM_ARRAY_JOB_ID": "1204", "SLURM_ARRAY_TASK_ID": "3",
         "SLURM_JOB_NAME": "lr-sweep", "SLURM_JOB_USER": "ada", "SLURMD_NODENAME": "n2"}


def test_expand_placeholders_and_variables_from_the_jobs_own_variables():
    assert expand("/ckpt/{name}/{array_job_id}/{array_task_id}", TASK3) == "/ckpt/lr-sweep/1204/3"
    assert expand("/scratch/{user}/{job_id}", TASK3) == "/scratch/ada/1207"
    assert expand("/ckpt/sweep/$SLURM_ARRAY_TASK_ID", TASK3) == "/ckpt/sweep/3"       # the case
    assert expand("/ckpt/${SLURM_ARRAY_JOB_ID}_{node}", TASK3) == "/ckpt/1204_n2"
    # a single job: {array_job_id} is its job id
    assert expand("/c/{array_job_id}", {"SLURM_JOB_ID": "9"}) == "/c/9"
    with pytest.raises(PathError, match=r"\{array_task_id\} needs \$SLURM_ARRAY_TASK_ID"):
        expand("/c/{array_task_id}", {"SLURM_JOB_ID": "9"})
    with pytest.raises(PathError, match=r"\$FOO is not set"):
        expand("/c/$FOO", TASK3)
    with pytest.raises(PathError, match="unknown placeholder"):
        expand("/c/{jobid}", TASK3)
    with pytest.raises(PathError, match="one path component"):
        expand("/c/{name}", {"SLURM_JOB_NAME": "../../etc"})


def test_problems_at_render_time():
    assert problems("/ckpt/{array_task_id}", sweep=True) == []
    assert problems("/ckpt/$SLURM_ARRAY_TASK_ID", sweep=True) == []
    assert "not a sweep" in problems("/ckpt/{array_task_id}", sweep=False)[0]
    assert "$RUN_NAME is not set" in problems("/ckpt/$RUN_NAME", sweep=False)[0]
    assert problems("/ckpt/$RUN_NAME", sweep=False, env_keys=("RUN_NAME",)) == []
    assert "unknown placeholder {step}" in problems("/ckpt/{step}", sweep=False)[0]


def test_a_sweep_gets_one_directory_per_task_by_default():
    assert per_task_default("/ckpt/sweep", True) == (
        "/ckpt/sweep/{array_task_id}",
        "every task of the sweep would share /ckpt/sweep: each task gets its own, /ckpt/sweep/{array_task_id}")
    assert per_task_default("/ckpt/sweep/{array_task_id}", True) == ("/ckpt/sweep/{array_task_id}", None)
    assert per_task_default("/ckpt/{job_id}", True)[1] is None
    assert per_task_default("/ckpt/ft", False) == ("/ckpt/ft", None)


def _render(tmp_path, text):
    p = tmp_path / "job.yaml"
    p.write_text(text)
    st = make_settings("{}")
    return render.render(specmod.load(str(p), ()), st, spec_name="job.yaml")


def test_render_shows_each_tasks_directory_and_the_wrapper_gets_the_template(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = _render(tmp_path, "name: s\ncommand: python t.py\ncheckpoint_dir: /ckpt/sweep\ncheckpoint:\n"
                          "  durable: s3://b/{user}/{name}\nsweep: {LR: ['1', '2', '3']}\n")
    assert "# 'checkpoint_dir: /ckpt/sweep/{0..2}'" in r.script
    assert "--checkpoint-dir '/ckpt/sweep/{array_task_id}' --durable 's3://b/{user}/{name}/{array_task_id}'" \
        in r.script
    assert any("every task of the sweep would share /ckpt/sweep" in n for n in r.notes)


def test_render_refuses_a_variable_the_job_will_not_have_with_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(UsageError) as e:
        _render(tmp_path, "name: s\ncommand: x\n\ncheckpoint_dir: /ckpt/$EXPERIMENT\n")
    assert "job.yaml:4" in str(e.value) and "$EXPERIMENT is not set in the job" in str(e.value)
