"""Property tests: any valid spec renders a script bash accepts and that delivers every value intact;
any invalid spec exits 2 with a one-line message, never a traceback."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from slurmkit import config
from slurmkit.jobs import keys, render, spec as specmod
from slurmkit.jobs.validate import OWNED_OPTIONS

from sitesettings import make_settings

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "submit"
SETTINGS = config.loads((GOLDEN / "site.yaml").read_text(), str(GOLDEN / "site.yaml"))
FIELDS = set(specmod.JobSpec.__fields__)


@pytest.fixture(autouse=True, scope="module")
def _no_cache():
    old = os.environ.get("SLURMKIT_NO_CACHE")
    os.environ["SLURMKIT_NO_CACHE"] = "1"   # every example renders through Jinja
    yield
    if old is None:
        os.environ.pop("SLURMKIT_NO_CACHE")
    else:
        os.environ["SLURMKIT_NO_CACHE"] = old


PROPS = hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# any text on one line (what #SBATCH values may hold), and any text at all (env values, arguments)
# (not YAML's own extra line breaks NEL, LS, PS: YAML folds those before slurmkit sees the value)
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\x85\u2028\u2029")
line = st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), min_size=1, max_size=20)
anytext = st.text(_chars, max_size=20)
ident = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z")
SHELL_SNIPPETS = ["true", "echo \"$HOSTNAME\"", "python train.py --lr $LR", "for i in 1 2; do echo $i; done",
                  "cd /tmp && ls | wc -l", "x=$(date +%s); echo ${x:-0}", "nvidia-smi -L || true"]


@st.composite
def valid_specs(draw):
    d = {}
    secs = draw(st.integers(300, 7 * 86400))
    d["time"] = f"{secs // 86400}-{secs % 86400 // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}"
    for key in ("name", "account", "qos", "workdir", "output"):
        if draw(st.booleans()):
            d[key] = draw(line)
    if draw(st.booleans()):  # a path with placeholders and $VARIABLEs has its own tests (tests/unit/jobs/test_ckpaths.py)
        d["checkpoint_dir"] = draw(line.filter(lambda t: not set(t) & set("${}")))
    d["partition"] = draw(st.sampled_from(["gpu", "other", None]))
    d["nodes"] = draw(st.integers(1, 4))
    d["gpus_per_node"] = draw(st.integers(0, 8))
    d["launcher"] = draw(st.sampled_from(["none", "srun", "torchrun"]))
    if d["launcher"] == "torchrun" and d["gpus_per_node"] == 0:
        d["torchrun"] = {"nproc_per_node": draw(st.integers(1, 4))}
    d["cpus_per_gpu"] = draw(st.sampled_from(["auto", 1, 2, 3]))
    d["mem"] = draw(st.from_regex(r"\A[1-9][0-9]{0,3}[KMGT]?\Z"))
    d["command"] = draw(st.one_of(st.lists(anytext, min_size=1, max_size=5).filter(lambda l: l != [""]),
                                  st.sampled_from(SHELL_SNIPPETS)))
    d["env"] = draw(st.dictionaries(ident, anytext, max_size=4))
    sweep = draw(st.dictionaries(ident, st.lists(anytext, min_size=1, max_size=3), max_size=2))
    d["sweep"] = {k: v for k, v in sweep.items() if k not in d["env"]}
    d["preemption"] = {"signal_lead": draw(st.integers(1, 299)), "max_requeues": draw(st.integers(0, 5)),
                       "requeue": draw(st.booleans())}
    # raw options, but not those a set key writes (mem, time, ...: refused as a conflict, tests/unit/jobs/test_spec_keys.py)
    owned = {n[2:] for names in OWNED_OPTIONS.values() for n in names}
    d["sbatch"] = draw(st.lists(st.builds(lambda a, b: f"--{a}={b}",
                                          st.from_regex(r"\A[a-z][a-z-]{0,10}\Z").filter(lambda n: n not in owned),
                                          line), max_size=2))
    # the keys that are sbatch options of their own (issue 30; their grammars: tests/unit/jobs/test_spec_keys.py)
    if draw(st.booleans()):
        d["comment"] = draw(line)
    if draw(st.booleans()):
        d["dependency"] = draw(st.one_of(st.lists(st.integers(1, 10 ** 6), min_size=1, max_size=3),
                                         st.sampled_from(["afterok:1:2", "afterany:3,afterok:4_1", "singleton"])))
    if draw(st.booleans()):
        d["constraint"] = draw(st.sampled_from(["h100", "ib&nvlink", "[rack1|rack2]", "a*2&b", "(x|y)&z"]))
    if draw(st.booleans()):
        d["mail"] = {"type": draw(st.lists(st.sampled_from(["BEGIN", "END", "FAIL", "requeue"]), min_size=1,
                                           max_size=3))}
    if draw(st.booleans()):
        d["setup"] = draw(st.lists(st.sampled_from(SHELL_SNIPPETS), max_size=3))
    if draw(st.booleans()):
        d["exclude"] = draw(st.sampled_from(["n3", ["n3", "n[5-6]"]]))
    if d["gpus_per_node"] and draw(st.booleans()):
        d["gpu_type"] = draw(st.sampled_from(["h100", "a100_80gb", "1g.10gb"]))
        d["mem_per_gpu"] = d.pop("mem")
    return {k: v for k, v in d.items() if v is not None}


def _render(d):
    text = yaml.safe_dump(d, allow_unicode=True)
    return render.render(specmod.loads(text, "job.yaml"), SETTINGS, spec_name="job.yaml").script


@PROPS
@given(valid_specs())
def test_valid_specs_render_scripts_bash_accepts(d):
    script = _render(d)
    res = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert res.returncode == 0, (res.stderr, script)
    # sbatch reads #SBATCH lines only up to the first command: all of them must be in the header
    header = script.split("\n# generated by slurmkit", 1)[0]
    assert script.count("\n#SBATCH ") == header.count("\n#SBATCH ")


PROBE = 'printf "%s\\0" "$@"; env -0'   # the arguments, then the environment, NUL-separated


@PROPS
@given(args=st.lists(anytext, max_size=5), env=st.dictionaries(ident.map(lambda k: "SKP_" + k), anytext,
                                                                   max_size=3),
       sweep=st.lists(anytext, min_size=1, max_size=3), wrapped=st.booleans())
def test_every_value_reaches_the_job_intact(args, env, sweep, wrapped):
    """Run the rendered script with bash (as the job's shell would, array task 0): argv and env arrive byte for
    byte, whatever quotes, dollars, backticks or newlines they hold."""
    with tempfile.TemporaryDirectory() as tmp:
        stub = Path(tmp) / "slurmkit"   # stands in for `slurmkit run`: runs what follows `--`
        stub.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
        stub.chmod(0o755)
        st_ = make_settings(f"submit:\n  slurmkit_bin: {stub}\n")
        d = {"command": ["sh", "-c", PROBE, "sh", *args], "env": env, "sweep": {"SKP_SWEEP": sweep}}
        if wrapped:
            d["checkpoint_dir"] = tmp
        spec = specmod.loads(yaml.safe_dump(d, allow_unicode=True), "job.yaml")
        script = render.render(spec, st_, spec_name="job.yaml").script
        e = {k: v for k, v in os.environ.items() if not k.startswith("SKP_")}
        res = subprocess.run(["bash", "-s"], input=script.encode(), capture_output=True,
                             env=dict(e, SLURM_ARRAY_TASK_ID="0"), timeout=30)
    assert res.returncode == 0, res.stderr
    items = res.stdout.decode().split("\0")
    got_args, got_env = items[:len(args)], dict(i.split("=", 1) for i in items[len(args):] if i.startswith("SKP_"))
    assert got_args == args
    assert got_env == dict(env, SKP_SWEEP=sweep[0])


from clirun import run_cli as _cli  # noqa: E402

BASE = {"command": ["true"], "gpus_per_node": 1, "time": "01:00:00", "nodes": 1, "launcher": "none",
        "env": {"A": "b"}, "preemption": {"signal_lead": 60}}
SCALAR_FIELDS = ["nodes", "gpus_per_node", "tasks_per_node", "cpus_per_gpu", "mem", "time", "launcher",
                 "sweep_parallel", "name", "partition"]
junk = st.one_of(st.text(max_size=8), st.integers(-5, 0), st.lists(st.integers(), max_size=2),
                 st.dictionaries(ident, st.integers(), min_size=1, max_size=2), st.none(), st.booleans())


@st.composite
def invalid_docs(draw):
    kind = draw(st.sampled_from(["unknown", "type", "env", "time", "lead", "sweep", "sbatch", "text", "nested",
                                 "keys"]))
    d = json.loads(json.dumps(BASE))
    if kind == "unknown":
        d[draw(ident.filter(lambda k: k not in FIELDS))] = draw(junk)
    elif kind == "type":
        key = draw(st.sampled_from(SCALAR_FIELDS))
        if key in ("name", "partition"):       # any scalar is a fine string: only structures are wrong
            val = draw(st.one_of(st.lists(st.integers(), max_size=2), st.dictionaries(ident, st.integers(),
                                                                                        min_size=1, max_size=2)))
        elif key in ("nodes", "tasks_per_node", "cpus_per_gpu", "gpus_per_node"):
            val = draw(st.one_of(st.integers(-5, -1 if key == "gpus_per_node" else 0), st.text(max_size=8)
                                 .filter(lambda t: t != "auto"), st.lists(st.integers(), max_size=2), st.booleans()))
        else:
            # mem: 0 is valid (all of the node's memory), as is any size MEM_RE accepts
            val = draw(junk.filter(lambda v: v is not None and not (
                key == "mem" and not isinstance(v, bool) and specmod.MEM_RE.match(str(v)))))
        d[key] = val
    elif kind == "env":
        d["env"] = {draw(st.text(min_size=1, max_size=6).filter(lambda k: not specmod.NAME_RE.match(k))): "v"}
    elif kind == "time":
        d["time"] = draw(st.text(max_size=8).filter(lambda t: not specmod.TIME_RE.match(t)))
    elif kind == "lead":
        d["preemption"]["signal_lead"] = draw(st.integers(3600, 10 ** 6))
    elif kind == "sweep":
        d["sweep"] = {"x": draw(st.sampled_from([[], "notalist", [[1]], {"a": 1}]))}
    elif kind == "sbatch":
        d["sbatch"] = [draw(st.text(max_size=8).filter(lambda t: not t.startswith("-") or t in ("-", "--")))]
    elif kind == "nested":
        d["preemption"] = {draw(ident.filter(lambda k: k not in ("signal_lead", "max_requeues", "requeue",
                                                                  "signal", "grace"))): 1}
    elif kind == "keys":  # a value its key's grammar refuses (keys.py), or a conflict between keys
        key, check = draw(st.sampled_from([("dependency", keys.dependency_text), ("constraint", keys.check_constraint),
                                           ("gpu_type", keys.check_gpu_type), ("mail", keys.mail_types),
                                           ("exclude", lambda t: keys.check_hosts([t])),
                                           ("conflict", None)]))
        if check is None:
            d.update(draw(st.sampled_from([{"mem": "1G", "mem_per_gpu": "1G"}, {"nodelist": "n1", "exclude": "n1"},
                                           {"comment": "x", "sbatch": ["--comment=y"]}])))
        else:
            val = draw(st.text(max_size=12).filter(lambda t: _refused(check, t)))
            d[key] = {"type": val} if key == "mail" else val
    else:
        return draw(st.text(max_size=60))
    return yaml.safe_dump(d, allow_unicode=True)


def _refused(check, text) -> bool:
    try:
        check(text)
    except ValueError:
        return True
    return False


@PROPS
@given(invalid_docs())
def test_invalid_specs_exit_2_with_a_message_never_a_traceback(text):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "job.yaml"
        p.write_text(text, encoding="utf-8")
        code, out, err = _cli(["--config", str(GOLDEN / "site.yaml"), "render", str(p)])
    assert code == 2, (text, out, err)
    assert err.startswith("slurmkit: error: ") and "Traceback" not in err and out == ""


def test_the_real_cli_exits_2_without_a_traceback(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text("command: x\nnodes: [1, 2]\n")
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", str(GOLDEN / "site.yaml"), "submit",
                        str(p), "--dry-run"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"slurmkit: error: {p}:2: nodes: expected an integer, got a list\n"
