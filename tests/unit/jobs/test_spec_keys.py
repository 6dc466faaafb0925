"""The spec keys that are sbatch options of their own (issue 30): dependency, typed and MIG GPUs, mem_per_gpu,
constraint, exclude, nodelist, mail, comment, setup, `--set key+=value`; the conflicts refused with file and line;
values that reach Slurm intact and never the shell. The rendered whole is a golden file (specs/keys.yaml)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from slurmkit import api, config
from slurmkit.errors import UsageError
from slurmkit.jobs import keys, render, spec as specmod
from slurmkit.jobs.check import check_request
from slurmkit.jobs.handle import Job
from slurmkit.jobs.pipeline import yaml_text
from slurmkit.slurm.capture import parse_scontrol_nodes
from slurmkit.slurm.records import NodeRecord, gres_gpu_types

from sbatch_parser import sbatch_arguments  # noqa: E402
from sitesettings import make_settings

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "submit"
SITE = GOLDEN / "site.yaml"
SETTINGS = make_settings(SITE)
PROPS = hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# real captures: typed Gres (gpu:m60:8, gpu:rtx2080:4, gpu:quadro:1) on one cluster, gpu:hopper:4 on another
HUJI = REPO / "tests" / "fixtures" / "slurm" / "huji-cs-scontrol-show-node-gpu-mixed-drain-trailing-spaces.txt"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def load(text, sets=()):
    return specmod.loads(textwrap.dedent(text), "job.yaml", sets)


def err(text, sets=()):
    with pytest.raises(UsageError) as e:
        load(text, sets)
    assert e.value.exit_code == 2
    return str(e.value)


def script(text, sets=(), st=SETTINGS):
    return render.render(load(text, sets), st, spec_name="job.yaml").script


def sbatch_args(s):
    out = []
    for ln in s.splitlines():
        if ln.startswith("#SBATCH "):
            out += sbatch_arguments(ln[len("#SBATCH "):])
    return out


# --- each key becomes its sbatch option ---------------------------------------------------------------------------

def test_every_key_renders_its_option():
    args = sbatch_args(script("""
        command: x
        gpus_per_node: 2
        gpu_type: h100
        mem_per_gpu: 80G
        dependency: afterok:123:124
        constraint: ib&nvlink
        exclude: [n3, "n[5-6]"]
        nodelist: n1
        mail: {type: [end, FAIL], user: me@example.org}
        comment: nightly eval
        """))
    for a in ["--gpus-per-node=h100:2", "--mem-per-gpu=80G", "--dependency=afterok:123:124",
              "--kill-on-invalid-dep=yes", "--constraint=ib&nvlink", "--exclude=n3,n[5-6]", "--nodelist=n1",
              "--mail-type=END,FAIL", "--mail-user=me@example.org", "--comment=nightly eval"]:
        assert a in args, (a, args)
    assert not any(a.startswith("--gpus-per-node=2") for a in args)


def test_a_whole_node_binding_keeps_the_gpu_type():
    # partition gpu has an 8-GPU topology profile: the binding's own --gpus-per-node=8 gets the type
    args = sbatch_args(script("command: x\npartition: gpu\ngpus_per_node: 8\nlauncher: srun\ngpu_type: h100\n"))
    assert "--gpus-per-node=h100:8" in args and "--gpus-per-node=8" not in args


@pytest.mark.parametrize("value,text", [
    ("123", "afterok:123"),
    ([123, 124], "afterok:123:124"),
    ([123, "afterany:9", 10], "afterok:123,afterany:9,afterok:10"),
    (["120_3"], "afterok:120_3"),
    ("afterok:1?afternotok:2", "afterok:1?afternotok:2"),
    ("singleton", "singleton"),
    ("after:5+10", "after:5+10"),
])
def test_dependency_forms(value, text):
    assert f"--dependency={text}" in sbatch_args(script(f"command: x\ndependency: {yaml_text(value)}\n"))


def test_a_python_job_is_its_id_in_a_dependency():
    assert yaml_text([Job(12), Job("13_4"), 14]) == '["12", "13_4", 14]'
    s = api.render({"command": "x", "dependency": [Job(12), Job("13_4")]}, config=str(SITE))
    assert "#SBATCH --dependency=afterok:12:13_4\n" in s
    s = api.render({"command": "x"}, config=str(SITE), dependency=Job(77))
    assert "#SBATCH --dependency=afterok:77\n" in s


def test_an_explicit_kill_on_invalid_dep_wins():
    args = sbatch_args(script("command: x\ndependency: 5\nsbatch: [--kill-on-invalid-dep=no]\n"))
    assert "--kill-on-invalid-dep=no" in args and "--kill-on-invalid-dep=yes" not in args


# --- bad values: file, line, what was got --------------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("dependency: aftrok:12\n", "job.yaml:2: dependency: 'aftrok:12': unknown dependency type 'aftrok'; "
                                "did you mean 'afterok'?"),
    ("dependency: afterok:12;rm\n", "is not a job id"),
    ("dependency: afterok:1,afterok:2?afterok:3\n", "mixes `,` (all of) and `?` (any of)"),
    ("dependency: []\n", "job.yaml:2: dependency: is an empty list"),
    ("gpu_type: 'h100;rm'\n", "job.yaml:2: gpu_type: expected a GPU type"),
    ("gpu_type: h100\ngpus_per_node: 0\n", "gpu_type: is set, but gpus_per_node is 0"),
    ("mem_per_gpu: 80GB\n", "job.yaml:2: mem_per_gpu: expected a size like 80G"),
    ("constraint: 'a b'\n", "job.yaml:2: constraint: 'a b': ' ' at character 2 is not part of a node feature"),
    ("constraint: \"x'$(id)\"\n", "is not part of a node feature expression"),
    ("constraint: a&\n", "ends with '&'"),
    ("constraint: '[a|b'\n", "unbalanced"),
    ("exclude: 'n[1-'\n", "job.yaml:2: exclude: bad hostlist"),
    ("exclude: 'n1 n2'\n", "is not a host list"),
    ("mail: {type: [END, FIAL]}\n", "job.yaml:2: mail.type: unknown mail type 'FIAL'; did you mean 'FAIL'?"),
    ("mail: {type: END, user: 'a b@c'}\n", "mail.user: expected a mail address or a user name"),
    ("mail: {user: me}\n", "missing key 'mail.type'"),
    ("comment: \"a\\nb\"\n", "job.yaml:2: comment: must be a single line"),
    ("setup: ['']\n", "job.yaml:2: setup[0]: is empty"),
])
def test_bad_values_name_the_file_line_and_what_was_got(text, want):
    e = err("command: x\n" + text)
    assert want in e, e


def test_sbatchs_typed_gpu_spelling_names_the_two_keys():
    assert err("command: x\ngpus_per_node: a100:4\n") == (
        "job.yaml:2: gpus_per_node: 'a100:4' is sbatch's spelling; write gpu_type: a100 and gpus_per_node: 4")
    assert err("command: x\n", ["gpus_per_node=1g.10gb:2"]).startswith("--set gpus_per_node: '1g.10gb:2'")


def test_conflicts_are_refused_with_file_and_line():
    assert err("command: x\nmem: 64G\nmem_per_gpu: 8G\n") == (
        "job.yaml:3: mem_per_gpu: is set together with mem: Slurm takes one of --mem and --mem-per-gpu; remove one")
    assert err("command: x\nnodes: 2\nnodelist: n[1-2]\nexclude: [n2]\n") == (
        "job.yaml:4: exclude: n2 is also in nodelist: a host cannot be both")
    assert err("command: x\nconstraint: h100\nsbatch: [--exclusive, --constraint=a100]\n") == (
        "job.yaml:3: sbatch[1]: --constraint=a100 sets what the key `constraint` (line 2) sets: keep one of them")
    assert "sbatch[0]: -C sets what the key `constraint`" in err("command: x\nconstraint: h\nsbatch: [-C]\n")
    assert "sbatch[0]: --mem-per-gpu=4G sets what the key `mem`" in err("command: x\nmem: 1G\nsbatch: [--mem-per-gpu=4G]\n")
    assert "key `gpu_type`" in err("command: x\ngpu_type: h100\nsbatch: ['--gres=gpu:a100:1']\n")
    assert "key `dependency`" in err("command: x\ndependency: 1\nsbatch: [-d, 'afterany:2']\n")
    assert "names 2 hosts, but nodes is 1" in err("command: x\nnodelist: n[1-2]\n")
    # a raw item the keys do not own is still fine; so is --gres for something else than GPUs
    assert "--gres=nvme:1" in script("command: x\ngpu_type: h100\nsbatch: [--gres=nvme:1]\n")


def test_a_conflict_made_with_set_names_the_set():
    e = err("command: x\nmem: 64G\n", ["mem_per_gpu=8G"])
    assert e.startswith("--set mem_per_gpu: is set together with mem"), e


# --- --set key+=value ---------------------------------------------------------------------------------------------

def test_set_appends_to_lists():
    s = load("command: x\nsbatch: [--exclusive]\nexclude: n3\nsetup: [module load a]\n",
             ["sbatch+=--hint=nomultithread", "exclude+=n4", "setup+=[echo 1, echo 2]", "nodelist+=n1"])
    assert s.sbatch == ["--exclusive", "--hint=nomultithread"]
    assert s.exclude == ["n3", "n4"] and s.nodelist == ["n1"]
    assert s.setup == ["module load a", "echo 1", "echo 2"]
    assert load("command: x\n", ["sbatch+=--exclusive"]).sbatch == ["--exclusive"]
    assert load("command: x\ndependency: 5\n", ["dependency+=6"]).dependency == ["5", "6"]
    assert load("command: x\n", ["setup+=echo a: b"]).setup == ["echo a: b"]  # not YAML for a list item: as typed


def test_set_append_to_a_non_list_is_refused():
    with pytest.raises(UsageError) as e:
        load("command: x\n", ["nodes+=2"])
    assert str(e.value) == "--set nodes+=2: 'nodes' is not a list; += adds to a list key (sbatch, setup, exclude, ...)"
    with pytest.raises(UsageError) as e:
        load("command: x\n", ["sbatch+=exclusive"])
    assert "--set sbatch[0]: expected an sbatch option" in str(e.value)


# --- setup ----------------------------------------------------------------------------------------------------------

def test_setup_runs_before_the_command_and_outside_the_container():
    s = script("""
        command: [python, train.py]
        container: {image: "nvcr.io#nvidia/pytorch:24.05-py3"}
        env: {A: "1"}
        setup: [module load cuda/12.4, source .venv/bin/activate]
        """)
    lines = s.splitlines()
    i, j = lines.index("module load cuda/12.4"), lines.index("source .venv/bin/activate")
    run = next(k for k, ln in enumerate(lines) if "--container-image" in ln)
    assert lines.index("export A=1") < i < j < run and lines[i - 1] == "set -e" and lines[j + 1] == "set +e"
    assert "module load" not in lines[run]


def test_a_failing_setup_line_ends_the_job(tmp_path):
    s = script("command: echo RAN\nsetup: ['echo SETUP', 'false', 'echo NOT']\n")
    res = subprocess.run(["bash", "-c", s], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == "SETUP\n"
    s = script("command: echo RAN\nsetup: ['echo SETUP']\n")
    res = subprocess.run(["bash", "-c", s], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == "SETUP\nRAN\n"


def test_a_template_that_drops_the_setup_is_refused(tmp_path):
    (tmp_path / "own.j2").write_text("#!/bin/bash\n{{ launch }}\n")
    p = tmp_path / "job.yaml"
    p.write_text("command: x\ntemplate: ./own.j2\nsetup: [module load a]\n")
    with pytest.raises(UsageError) as e:
        render.render(specmod.load(str(p)), SETTINGS, spec_name="job.yaml")
    assert f"{p}:3: setup: template own.j2 does not place the setup lines" in str(e.value)


# --- against the cluster's nodes -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def huji():
    return parse_scontrol_nodes(HUJI.read_text())


def refused(text, records, partition):
    with pytest.raises(UsageError) as e:
        check_request(load(text), partition, None, records)
    return str(e.value)


def test_gres_gpu_types_from_real_gres_strings(huji):
    assert {r.name: gres_gpu_types(r.gres) for r in huji} == {
        "cortex-01": {"m60": 8}, "dumfries-002": {"rtx2080": 4}, "oxygen-04": {}, "cricket": {"quadro": 1}}


def test_the_gpu_type_is_checked_against_the_nodes_gres(huji):
    check_request(load("command: x\ngpu_type: rtx2080\ngpus_per_node: 4\n"), "medium", None, huji)
    e = refused("command: x\ngpu_type: h100\ngpus_per_node: 1\n", huji, "short")
    assert e.startswith("job.yaml:2: gpu_type: no node of partition short has 1 GPUs of type 'h100' in its Gres")
    assert "m60 (up to 8 per node), quadro (up to 1 per node), rtx2080 (up to 4 per node)" in e
    e = refused("command: x\ngpu_type: m60\ngpus_per_node: 8\nnodes: 2\n", huji, "short")
    assert e == ("job.yaml:4: nodes: 2 nodes requested, but partition short has 1 with 8 m60 GPUs or more; "
                 "refused before submission")


def test_mig_profiles_are_types_where_the_gres_lists_them():
    # synthetic: a node whose Gres lists MIG profiles as gres.conf's AutoDetect=nvml names them (no capture here)
    recs = [NodeRecord(name="m1", state="IDLE", gres="gpu:1g.10gb:7,gpu:3g.40gb:2", gpus_total=9,
                       partitions=["mig"], cpus=64)]
    check_request(load("command: x\ngpu_type: 1g.10gb\ngpus_per_node: 2\n"), "mig", None, recs)
    e = refused("command: x\ngpu_type: 2g.20gb\n", recs, "mig")
    assert "1g.10gb (up to 7 per node), 3g.40gb (up to 2 per node)" in e


def test_untyped_gres_refuses_a_gpu_type():
    # the dev cluster's Gres is gpu:8 (no type): say so, not a bare sbatch error
    recs = [NodeRecord(name="n1", state="IDLE", gres="gpu:8", gpus_total=8, partitions=["gpu"], cpus=16)]
    assert "untyped GPUs only" in refused("command: x\ngpu_type: h100\n", recs, "gpu")


def test_nodelist_and_exclude_are_checked_against_the_nodes(huji):
    e = refused("command: x\ngpus_per_node: 0\nnodelist: [cortex-02]\n", huji, "short")
    assert e.startswith("job.yaml:3: nodelist: cortex-02: not a usable node of partition short")
    e = refused("command: x\ngpus_per_node: 1\nnodes: 3\nexclude: [cricket]\n", huji, "short")
    assert "3 nodes requested, but partition short has 2" in e
    check_request(load("command: x\ngpus_per_node: 4\nexclude: [cricket]\n"), "short", None, huji)


# --- property tests: the value parsers, and values reaching Slurm intact -------------------------------------------

jid = st.from_regex(r"\A[1-9][0-9]{0,6}(_[0-9]{1,3})?\Z")


@PROPS
@given(st.lists(st.one_of(jid, st.tuples(st.sampled_from(keys.DEPENDENCY_TYPES), st.lists(jid, min_size=1,
                                                                                               max_size=3))),
                min_size=1, max_size=5))
def test_dependency_lists_render_every_id_once_in_order(items):
    value = [i if isinstance(i, str) else f"{i[0]}:{':'.join(i[1])}" for i in items]
    text = keys.dependency_text(value)
    assert keys.dependency_text(text) == text  # its own output is a valid expression
    ids = [p for part in text.split(",") for p in part.split(":")[1:]]
    want = [x for i in items for x in ([i] if isinstance(i, str) else i[1])]
    assert ids == want


@PROPS
@given(st.text(max_size=30))
def test_any_text_is_a_dependency_or_a_clear_error(text):
    try:
        out = keys.dependency_text(text)
    except ValueError as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert set(out) <= set("abcdefghijklmnopqrstuvwxyz0123456789:_,?+")


@PROPS
@given(st.text(max_size=30))
def test_a_constraint_that_passes_has_no_shell_or_quote_characters(text):
    try:
        keys.check_constraint(text)
    except ValueError as e:
        assert "\n" not in str(e)
    else:
        assert not set(text) & set(" \t'\"\\$`;<>#!{}~\n")


@PROPS
@given(st.lists(st.sampled_from([*keys.MAIL_TYPES, "end", "Fail"]), min_size=1, max_size=4))
def test_mail_types_are_upper_case_and_once_each(types):
    try:
        out = keys.mail_types(types)
    except ValueError as e:
        assert "NONE with other" in str(e)
    else:
        assert out == list(dict.fromkeys(t.upper() for t in types))


line = st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), min_size=1, max_size=30)


@PROPS
@given(comment=line)
def test_a_comment_reaches_slurm_as_written_and_bash_never_runs_it(comment):
    s = script(yaml.safe_dump({"command": ["true"], "comment": comment}, allow_unicode=True))
    assert f"--comment={comment}" in sbatch_args(s)
    assert subprocess.run(["bash", "-n"], input=s, capture_output=True, text=True).returncode == 0
    assert [ln for ln in s.splitlines() if "--comment" in ln] == [ln for ln in s.splitlines()
                                                                  if ln.startswith("#SBATCH --comment=")]
