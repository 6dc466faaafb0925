"""Rendering: golden files for every template and example, quoting, template errors, bash -n."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.jobs import render, spec as specmod, templates

from clirun import run_cli
from sbatch_parser import sbatch_arguments
from sitesettings import make_settings

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "submit"
UPDATE = os.environ.get("SLURMKIT_UPDATE_GOLDEN") == "1"
CASES = sorted([("examples", p) for p in (REPO / "examples").glob("*.yaml")]
               + [("specs", p) for p in (GOLDEN / "specs").glob("*.yaml")])


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def settings():
    site = GOLDEN / "site.yaml"
    return make_settings(site)


def render_file(path: Path, st=None, sets=()):
    spec = specmod.load(str(path), sets)
    return render.render(spec, st or settings(), spec_name=path.name)


@pytest.mark.parametrize("kind,path", CASES, ids=[p.stem for _, p in CASES])
def test_golden(kind, path):
    r = render_file(path)
    golden = GOLDEN / f"{path.stem}.sh"
    if UPDATE:
        golden.write_text(r.script)
    assert r.script == golden.read_text(), f"{golden} differs (SLURMKIT_UPDATE_GOLDEN=1 rewrites it; review the diff)"
    res = subprocess.run(["bash", "-n"], input=r.script, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_every_builtin_template_has_a_golden_case():
    used = {render_file(p).template for _, p in CASES}
    builtin = {p.name for p in Path(templates.BUILTIN_DIR).glob("*.sbatch.j2")} - {"base.sbatch.j2"}
    assert builtin <= used


def test_templates_are_chosen_by_launcher_and_sweep():
    t = {p.stem: render_file(p).template for _, p in CASES}
    assert t["finetune-1gpu"] == "single.sbatch.j2" and t["sweep"] == "sweep.sbatch.j2"
    assert t["torchrun-2node"] == "torchrun.sbatch.j2" and t["site-template"] == "site-banner.sbatch.j2"


def test_preemption_safe_defaults_and_wrapper():
    s = render_file(REPO / "examples" / "finetune-1gpu.yaml").script
    assert "#SBATCH --signal=B:USR2@180\n#SBATCH --requeue\n#SBATCH --open-mode=append\n" in s
    assert ("exec /opt/slurmkit/bin/slurmkit run --signal USR2 --checkpoint-signal TERM --grace 120 --max-requeues 5 "
            "--checkpoint-dir /scratch/checkpoints/finetune-llama-lora -- python finetune.py") in s
    # without a checkpoint dir: no wrapper, and USR2 is trapped so it does not end the job early
    s = render_file(REPO / "examples" / "sweep.yaml").script
    assert "slurmkit run --" not in s and "trap '" in s and "USR2" in s
    assert "--no-requeue" in render_file(GOLDEN / "specs" / "sweep-srun.yaml").script


def test_profile_sets_cpus_per_gpu_and_plain_without_profile():
    r = render_file(REPO / "examples" / "finetune-1gpu.yaml")
    assert "#SBATCH --cpus-per-gpu=2\n" in r.script          # 16 CPUs / 8 GPUs in the dev profile
    assert any("topology profile" in n for n in r.notes)
    r = render_file(GOLDEN / "specs" / "plain-1gpu.yaml")
    assert "cpus-per-gpu" not in r.script and any("no topology profile" in n for n in r.notes)


def test_whole_node_gets_the_binding_from_the_profile():
    r = render_file(GOLDEN / "specs" / "srun-8gpu-bound.yaml")
    assert "#SBATCH --ntasks-per-node=2\n#SBATCH --gpus-per-node=8\n#SBATCH --cpus-per-task=8\n" in r.script
    assert "#SBATCH --exclusive\n" in r.script and "--cpus-per-gpu" not in r.script
    assert "srun --kill-on-bad-exit=1 --gpu-bind=mask_gpu:0xf,0xf0 --cpu-bind=mask_cpu:0xff,0xff00 python" in r.script
    assert any("task 0: GPUs [0, 1, 2, 3] CPUs 0-7; task 1: GPUs [4, 5, 6, 7] CPUs 8-15" in n for n in r.notes)
    # an explicit cpus_per_gpu wins over the profile, and then no --cpu-bind
    r = render_file(GOLDEN / "specs" / "srun-8gpu-bound.yaml", sets=["cpus_per_gpu=1"])
    assert "--cpus-per-gpu=1" in r.script and "--cpus-per-task" not in r.script and "--cpu-bind" not in r.script


def test_grace_must_fit_in_the_signal_lead():
    with pytest.raises(UsageError) as e:
        render_file(REPO / "examples" / "finetune-1gpu.yaml", sets=["preemption.grace=160"])
    assert "preemption.grace: 160s to checkpoint needs a signal lead of more than 190s" in str(e.value)


def test_too_many_gpus_for_the_profile_is_refused():
    with pytest.raises(UsageError) as e:
        render_file(REPO / "examples" / "finetune-1gpu.yaml", sets=["gpus_per_node=9"])
    assert "9 GPUs per node, but the nodes of partition gpu have 8" in str(e.value)


def test_values_are_quoted_and_the_string_command_is_shell_text():
    s = render_file(GOLDEN / "specs" / "torchrun-1node-list.yaml").script
    assert "--name 'it'\"'\"'s \"quoted\" $HOME `id`'" in s
    s = render_file(GOLDEN / "specs" / "sweep-srun.yaml").script
    assert "0) export lr=0.1 opt=adam ;;" in s and "export lr='0.2; rm -rf ~' opt='sgd m'" in s
    assert "bash -c 'echo \"$SLURM_PROCID $lr $opt\"'" in s


def test_container_needs_site_support():
    st = settings()
    st.submit.containers = False
    with pytest.raises(UsageError) as e:
        render_file(GOLDEN / "specs" / "container.yaml", st)
    assert str(e.value).startswith(f"{GOLDEN / 'specs' / 'container.yaml'}:5: container.image: this site runs no")


def test_template_errors_name_template_and_line(tmp_path):
    (tmp_path / "broken.sbatch.j2").write_text('#!/bin/bash\n{{ launch }}\n{% if %}\n')
    (tmp_path / "undef.sbatch.j2").write_text('#!/bin/bash\n# ok\necho {{ no_such_var }}\n')
    st = settings()
    st.submit.template_dirs = [str(tmp_path)]
    spec = tmp_path / "job.yaml"
    spec.write_text("command: [true]\ntemplate: broken\n")
    with pytest.raises(UsageError) as e:
        render_file(spec, st)
    assert str(e.value).startswith(f"{tmp_path}/broken.sbatch.j2:3: template error:")
    spec.write_text("command: [true]\ntemplate: undef\n")
    with pytest.raises(UsageError) as e:
        render_file(spec, st)
    assert str(e.value) == f"{tmp_path}/undef.sbatch.j2:3: template error: 'no_such_var' is undefined"
    spec.write_text("command: [true]\ntemplate: nope\n")
    with pytest.raises(UsageError) as e:
        render_file(spec, st)
    assert str(e.value).startswith(f"{spec}:2: template 'nope.sbatch.j2' not found in {tmp_path}")


def test_template_path_relative_to_the_spec(tmp_path):
    shutil.copy(GOLDEN / "site-templates" / "site-banner.sbatch.j2", tmp_path / "mine.j2")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\ncommand: [true]\ntemplate: ./mine.j2\n")
    assert "site banner: x on" in render_file(spec, make_settings()).script


def test_an_edited_or_shadowing_template_is_rendered_fresh(tmp_path):
    """Compiled templates are cached (Jinja's bytecode cache): an edit, or a new site file that shadows the
    template it extends, shows in the very next render."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "mine.sbatch.j2").write_text('{% extends "single.sbatch.j2" %}{% block run %}echo v1\n{% endblock %}')
    st = settings()
    st.submit.template_dirs = [str(site)]
    spec = tmp_path / "job.yaml"
    spec.write_text("command: [true]\ntemplate: mine\n")
    first = render_file(spec, st)
    assert "echo v1" in first.script and render_file(spec, st).script == first.script
    assert any((tmp_path / "cache" / "slurmkit" / "jinja").iterdir())
    (site / "mine.sbatch.j2").write_text('{% extends "single.sbatch.j2" %}{% block run %}echo v2!\n{% endblock %}')
    assert "echo v2!" in render_file(spec, st).script
    (site / "base.sbatch.j2").write_text("#!/bin/bash\n# site base\n{% block run %}{% endblock %}\n")
    assert render_file(spec, st).script.startswith("#!/bin/bash\n# site base\n")


def _plant_bytecode(cache: Path, site: Path, evil: str) -> None:
    """What an attacker who can write the cache directory plants: code compiled from `evil`, filed under the real
    template's name and the real source's checksum, so Jinja would take it for the real template's bytecode."""
    import jinja2

    cache.mkdir(parents=True, exist_ok=True)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(site)]), keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    bcc = jinja2.FileSystemBytecodeCache(str(cache))
    src, filename, _ = env.loader.get_source(env, "mine.sbatch.j2")
    bucket = bcc.get_bucket(env, "mine.sbatch.j2", filename, src)
    bucket.code = env.compile(evil, "mine.sbatch.j2", filename)
    bcc.set_bucket(bucket)


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "another user's", "a link"])
def test_a_cache_others_can_write_is_never_used(tmp_path, how):
    """Compiled templates are code that runs: a bytecode cache directory another user owns or can write (a shared
    $XDG_CACHE_HOME, `sudo -E`) is ignored, and its planted entry never runs."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "mine.sbatch.j2").write_text("#!/bin/bash\necho real\n")
    st = settings()
    st.submit.template_dirs = [str(site)]
    spec = tmp_path / "job.yaml"
    spec.write_text("command: [true]\ntemplate: mine\n")
    jinja_dir = tmp_path / "cache" / "slurmkit" / "jinja"
    planted = tmp_path / "elsewhere" if how == "a link" else jinja_dir
    _plant_bytecode(planted, site, "#!/bin/bash\necho PLANTED\n")
    if how != "a link":  # the plant works where the directory is ours alone
        assert "PLANTED" in render_file(spec, st).script
    if how == "group-writable":
        jinja_dir.chmod(0o770)
    elif how == "world-writable":
        (tmp_path / "cache" / "slurmkit").chmod(0o777)
    elif how == "another user's":
        os.chown(jinja_dir, 65534, 65534)
    else:
        jinja_dir.parent.mkdir(parents=True, exist_ok=True)
        jinja_dir.symlink_to(planted)
    assert "echo real" in render_file(spec, st).script


def test_submit_path_imports_only_what_it_needs(tmp_path):
    """render never loads paramiko."""
    code = ("import io, sys, contextlib\nfrom slurmkit.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--config', sys.argv[1], 'render', sys.argv[2]])\n"
            "    except SystemExit:\n        pass\n"
            "print('paramiko' in sys.modules, 'jinja2' in sys.modules)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    args = [sys.executable, "-c", code, str(GOLDEN / "site.yaml"), str(REPO / "examples" / "sweep.yaml")]
    first = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout.split()
    second = subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout.split()
    assert first == second == ["False", "True"]


# ==============================================================================================================
# Issue 17, job specs and the renderer, folded from test_hardening_submit.py
# Issue 17, job specs and the renderer: each reproduction of the issue gives a clear error or a safe script.
# Inputs are synthetic (made in the test), as the reproductions were.
# ==============================================================================================================

SITE = str(GOLDEN / "site.yaml")


@pytest.fixture
def _no_cache(monkeypatch):
    monkeypatch.setenv("SLURMKIT_NO_CACHE", "1")



def _render(tmp_path, text, name="job.yaml", *sets, site=SITE):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    argv = ["--config", site, "render", str(p)]
    for s in sets:
        argv += ["--set", s]
    return run_cli(argv)


def _ok(tmp_path, text, name="job.yaml"):
    code, out, err = _render(tmp_path, text, name)
    assert code == 0, err
    return out


def _err(tmp_path, text, name="job.yaml", *sets):
    code, out, err = _render(tmp_path, text, name, *sets)
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    return err.strip()


# --- S2: the spec's file name in the script ------------------------------------------------------------------------

EVIL = "x\n#SBATCH --output=INJ\ntouch PWNED\n.yaml"


@pytest.mark.usefixtures("_no_cache")
def test_s2_file_name_cannot_add_sbatch_lines_or_commands(tmp_path):
    out = _ok(tmp_path, "name: safe\ncommand: [true]\n", EVIL)
    lines = out.splitlines()
    assert not any(ln.startswith("#SBATCH --output") for ln in lines)
    assert "touch PWNED" not in lines
    assert not any(ln.lstrip().startswith("touch") for ln in lines)
    comment = next(ln for ln in lines if ln.startswith("# generated by slurmkit from"))
    assert "\\n#SBATCH --output=INJ\\ntouch PWNED" in comment
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0


@pytest.mark.usefixtures("_no_cache")
def test_s2_job_name_from_the_file_name_must_be_one_line(tmp_path):
    err = _err(tmp_path, "command: [true]\n", EVIL)
    assert "set `name:` in the spec" in err and "\n" not in err


@pytest.mark.usefixtures("_no_cache")
def test_job_name_from_an_ordinary_file_name(tmp_path):
    out = _ok(tmp_path, "command: [true]\n", "train-7b.yaml")
    assert "#SBATCH --job-name=train-7b\n" in out


# --- W4: a trailing newline is not a valid value ------------------------------------------------------------------

@pytest.mark.parametrize("doc,key", [
    ('command: x\nmem: "64G\\n"\n', "mem"),
    ("command: x\ntime: |\n  01:00:00\n", "time"),
    ('command: x\nenv:\n  "FOO\\n": v\n', "env.FOO"),
    ('command: x\nsweep:\n  "LR\\n": [1, 2]\n', "sweep.LR"),
])
@pytest.mark.usefixtures("_no_cache")
def test_w4_trailing_newline_refused(tmp_path, doc, key):
    assert f": {key}" in _err(tmp_path, doc)


# --- W5: sbatch extras ----------------------------------------------------------------------------------------------

@pytest.mark.usefixtures("_no_cache")
def test_w5_option_name_with_a_space_is_refused(tmp_path):
    err = _err(tmp_path, "command: x\nsbatch: ['--exclusive --gres=gpu:99']\n")
    assert "sbatch[0]: expected an sbatch option" in err


@pytest.mark.parametrize("value", ["a\\b", "x\\", "it's", 'say "hi"', "a#b c", "\\'\\\\"])
@pytest.mark.usefixtures("_no_cache")
def test_w5_values_survive_slurms_own_parser(tmp_path, value):
    """sbatch reads `#SBATCH` lines with its own rules (a backslash escapes even inside quotes; a trailing one
    aborts it): each value reaches Slurm as written. sbatch_parser.py is opt.c's _get_argument, in Python."""
    import yaml
    out = _ok(tmp_path, yaml.safe_dump({"command": ["true"], "sbatch": [f"--comment={value}"],
                                        "account": value}))
    args = [sbatch_arguments(ln[len("#SBATCH "):]) for ln in out.splitlines() if ln.startswith("#SBATCH ")]
    assert [f"--comment={value}"] in args and [f"--account={value}"] in args


# --- W6: templates come from the search path or below the spec's directory ------------------------------------------

@pytest.mark.parametrize("t", ["/etc/passwd", "../outside.j2", "sub/../../outside.j2", "~/x.j2"])
@pytest.mark.usefixtures("_no_cache")
def test_w6_template_outside_the_spec_dir_is_refused(tmp_path, t):
    (tmp_path / "outside.j2").write_text("SECRET\n")
    d = tmp_path / "specs"
    d.mkdir()
    code, out, err = run_cli(["--config", SITE, "render", str(_write(d, f"command: x\ntemplate: {t!r}\n"))])
    assert code == 2 and "SECRET" not in out and "root:" not in out
    assert "template" in err


@pytest.mark.usefixtures("_no_cache")
def test_w6_template_link_leading_out_is_refused(tmp_path):
    (tmp_path / "outside.j2").write_text("SECRET\n")
    d = tmp_path / "specs"
    d.mkdir()
    os.symlink(tmp_path / "outside.j2", d / "t.j2")
    code, out, err = run_cli(["--config", SITE, "render", str(_write(d, "command: x\ntemplate: ./t.j2\n"))])
    assert code == 2 and "SECRET" not in out and "leads outside" in err


@pytest.mark.usefixtures("_no_cache")
def test_w6_template_below_the_spec_dir_still_works(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "mine.j2").write_text('{% extends "base.sbatch.j2" %}{% block setup %}# mine\n'
                                              '{% endblock %}')
    code, out, err = run_cli(["--config", SITE, "render", str(_write(tmp_path, "command: x\ntemplate: tpl/mine.j2\n"))])
    assert code == 0, err
    assert "# mine" in out


def _write(d, text, name="job.yaml"):
    p = Path(d) / name
    p.write_text(text)
    return p


# --- W7 / T1: digits --------------------------------------------------------------------------------------------

@pytest.mark.usefixtures("_no_cache")
def test_w7_unicode_digits_are_not_a_time(tmp_path):
    assert "time: expected a Slurm time" in _err(tmp_path, 'command: x\ntime: "٣:٠٠:٠٠"\n')


@pytest.mark.usefixtures("_no_cache")
def test_t1_a_5000_digit_integer_is_refused_with_its_line(tmp_path):
    err = _err(tmp_path, "command: x\nnodes: " + "1" * 5000 + "\n")
    assert "job.yaml:2:" in err and "digits" in err and len(err) < 300


# --- H2 / H7 / H8: bounds on the spec ------------------------------------------------------------------------------

@pytest.mark.usefixtures("_no_cache")
def test_h2_anchor_bomb_in_an_env_key_is_refused_fast_and_short(tmp_path):
    levels = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 8):
        levels.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    text = "x-anchors:\n" + "\n".join("  " + ln for ln in levels) + "\ncommand: x\nenv:\n  ? *a7\n  : v\n"
    p = _write(tmp_path, text)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", SITE, "render", str(p)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[:500]
    assert len(r.stderr) < 500
    assert time.monotonic() - t0 < 120


@pytest.mark.usefixtures("_no_cache")
def test_h2_anchor_bomb_in_values_is_refused(tmp_path):
    levels = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 7):
        levels.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    text = "sweep:\n" + "\n".join("  " + ln for ln in levels) + "\ncommand: x\n"
    assert "aliases" in _err(tmp_path, text)


@pytest.mark.usefixtures("_no_cache")
def test_deep_nesting_is_refused(tmp_path):
    # the one typed-YAML loader's bound and words, shared with the site config (file, line and key)
    assert "job.yaml:2: env: nested too deeply (the limit is 64 levels)" in _err(
        tmp_path, "command: x\nenv: " + "[" * 100 + "]" * 100 + "\n")
    assert "job.yaml:2: nested too deeply (the limit is 64 levels)" in _err(
        tmp_path, "command: x\nenv: " + "[" * 3000 + "]" * 3000 + "\n")


@pytest.mark.usefixtures("_no_cache")
def test_h7_a_spec_over_the_limit_names_the_limit(tmp_path):
    p = tmp_path / "big.yaml"
    with open(p, "wb") as f:
        f.truncate(specmod.SPEC_LIMIT + 1)        # sparse: the size is refused before anything is read
    code, out, err = run_cli(["--config", SITE, "render", str(p)])
    assert code == 2 and "over the limit of 16 MiB" in err


@pytest.mark.usefixtures("_no_cache")
def test_h8_a_fifo_spec_does_not_block(tmp_path):
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", SITE, "render", str(fifo)],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "FIFO" in r.stderr


# --- T5: a topology profile of the wrong shape ----------------------------------------------------------------------

@pytest.mark.usefixtures("_no_cache")
def test_t5_profile_with_wrong_gpu_entries_is_a_clear_error(tmp_path):
    (tmp_path / "prof.json").write_text('{"gpus": [1, 2, 3]}')
    site = tmp_path / "site.yaml"
    site.write_text("submit:\n  profiles:\n    gpu: prof.json\n")
    code, out, err = _render(tmp_path, "command: x\npartition: gpu\ngpus_per_node: 1\n", site=str(site))
    assert code == 2 and "Traceback" not in err
    assert "submit.profiles.gpu" in err and f"{site}:3:" in err


# --- U1 / U3: messages ----------------------------------------------------------------------------------------------

@pytest.mark.usefixtures("_no_cache")
def test_u1_command_list_item_is_named(tmp_path):
    assert _err(tmp_path, "command: [python, x, null]\n").endswith(
        "job.yaml:1: command[2]: expected a string (each list item is one argument), got null")


@pytest.mark.usefixtures("_no_cache")
def test_u3_set_error_on_a_list_item_is_blamed_on_set(tmp_path):
    err = _err(tmp_path, "command: x\n", "job.yaml", "sbatch=[x]")
    assert "--set sbatch[0]:" in err and "job.yaml" not in err


@pytest.mark.usefixtures("_no_cache")
def test_u3_set_time_error_is_blamed_on_set(tmp_path):
    err = _err(tmp_path, "time: '02:00:00'\ncommand: x\n", "job.yaml", "time=1")
    assert err.startswith("slurmkit: error: --set time:"), err


@pytest.mark.usefixtures("_no_cache")
def test_cpus_per_node_comes_from_the_values_not_the_quoted_text():
    st = make_settings("submit: {}\n")
    spec = specmod.loads("command: x\ngpus_per_node: 2\ncpus_per_gpu: 6\n", "job.yaml")
    assert render.plan(spec, st, spec_name="job.yaml").cpus_per_node == 12


@pytest.mark.usefixtures("_no_cache")
def test_t5_profile_with_a_huge_cpu_id_is_refused_before_the_planner_makes_its_mask(tmp_path):
    """Synthetic profile: CPU id 10**12 would make a 125 GB --cpu-bind mask."""
    import json
    gpu = {"index": 0, "cpus": [10 ** 12], "numa": [0], "links": {}}
    (tmp_path / "prof.json").write_text(json.dumps({"gpus": [gpu], "nics": [], "interconnect": "pcie"}))
    site = tmp_path / "site.yaml"
    site.write_text("submit:\n  profiles:\n    gpu: prof.json\n")
    code, out, err = _render(tmp_path, "command: x\npartition: gpu\ngpus_per_node: 1\nlauncher: srun\n",
                             site=str(site))
    assert code == 2 and "cpus and numa must be lists of non-negative integers (0 to 1048575)" in err
