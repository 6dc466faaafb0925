"""Property tests over every parser of captured output and of job specs, and the renderer (issue 17): never a
traceback (a parse returns data or raises UsageError), never a hang (each example runs under an alarm), never
`ok` on input a check cannot read, and every rendered value survives bash and Slurm's own `#SBATCH` parser.

Inputs: real captures from tests/fixtures, damaged by hypothesis (truncated, bytes changed, lines dropped or
repeated), and text with none of a format's structure. CI runs them derandomized (tests/conftest.py)."""
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings as hsettings, strategies as st

from slurmkit import hostlist
from slurmkit.errors import UsageError
from slurmkit.health import nccl as nccl_parse, nvlink as nvlink_parse, nvsmi
from slurmkit.health.base import STATUSES
from slurmkit.health.checks import driver, ecc, gpu_count, gpu_procs, nccl, nvlink, pcie
from slurmkit.jobs import render, spec as specmod
from slurmkit.topology import parse_topo
from slurmkit.topology.cpus import parse_cpu_layout

from sitesettings import make_settings

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
from nohang import no_hang as _no_hang  # noqa: E402
from sbatch_parser import sbatch_arguments  # noqa: E402

S = make_settings("{}\n")
HANG_SECONDS = 20          # far past any parse of these inputs (milliseconds); a hang is a failure, not a wait
# SLURMKIT_PROP_EXAMPLES=2000 for a deeper local search; CI keeps 60 (the whole file well under a minute)
PROPS = hsettings(max_examples=int(os.environ.get("SLURMKIT_PROP_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.data_too_large])


def no_hang(seconds=HANG_SECONDS):
    return _no_hang(seconds)


def _texts(*globs):
    out = []
    for g in globs:
        out += [p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIX.glob(g))]
    assert out, globs
    return out


Q_TEXTS = _texts("ecc/*.txt", "misc/*nvidia-smi*")
NCCL_TEXTS = _texts("nccl/*.txt")
TOPO_TEXTS = _texts("topo/*.txt")
LSCPU_TEXTS = _texts("lscpu/*")


@st.composite
def damaged(draw, texts):
    """A real capture, damaged the ways captures are: cut short, a byte changed, lines lost or repeated."""
    text = draw(st.sampled_from(texts))
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["cut", "char", "drop", "dup", "na", "digits"]))
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if op == "cut":
            lines = lines[:i]
        elif op == "char":
            ln = lines[i]
            j = draw(st.integers(0, max(0, len(ln) - 1)))
            lines[i] = ln[:j] + draw(st.characters(blacklist_categories=("Cs",))) + ln[j + 1:]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "na":
            lines[i] = lines[i].split(":")[0] + ": N/A\n" if ":" in lines[i] else lines[i]
        else:
            lines[i] = lines[i].replace("0", draw(st.sampled_from(["nan", "inf", "1e400", "²", "9" * 5000, "٣"])))
    return "".join(lines)


# text with none of the structure the parsers look for: no digits, no colons
junk = st.text(st.characters(blacklist_categories=("Cs", "Nd", "No"), blacklist_characters=":"), max_size=300)


def _verdict(fn, *args):
    """A check's verdict, or None when it said it could not read the input (NoData/UsageError)."""
    with no_hang():
        try:
            r = fn(*args)
        except UsageError:
            return None
    assert r.status in STATUSES and isinstance(r.reason, str)
    return r


Q_CHECKS = [lambda t: driver.evaluate(t, S.driver), lambda t: ecc.evaluate(t, S.ecc),
            lambda t: gpu_count.evaluate(t, None), lambda t: gpu_procs.evaluate(t, None, S.gpu_procs),
            lambda t: pcie.evaluate(t, S.pcie)]


@PROPS
@given(damaged(Q_TEXTS))
def test_q_checks_never_raise_on_damaged_captures(text):
    with no_hang():
        nvsmi.parse_q(text)
        nvsmi.parse_csv(text)
    for check in Q_CHECKS:
        _verdict(check, text)


@PROPS
@given(junk)
def test_q_checks_are_never_ok_on_unreadable_text(text):
    for check in Q_CHECKS:
        r = _verdict(check, text)
        assert r is None or r.status != "ok", (r, text)


@PROPS
@given(damaged(NCCL_TEXTS))
def test_nccl_never_raises_and_never_reads_a_non_finite_bandwidth(text):
    with no_hang():
        p = nccl_parse.parse(text)
    import math
    for k in ("avg_bus_bandwidth_gbps", "peak_busbw_gbps"):
        assert p[k] is None or math.isfinite(p[k])
    r = _verdict(nccl.evaluate, text, 100.0, S.nccl)
    if r is not None and r.status == "ok":
        assert p["unreadable"] == [] and p["avg_bus_bandwidth_gbps"] is not None


@PROPS
@given(junk)
def test_nccl_is_never_ok_on_unreadable_text(text):
    r = _verdict(nccl.evaluate, text, None, S.nccl)
    assert r is None or r.status != "ok"


NVLINK_S = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n")
NVLINK_E = ("GPU 0: NVIDIA H100 (UUID: GPU-a)\n\t Link 0: Replay Errors: 0\n\t Link 0: Recovery Errors: 0\n"
            "\t Link 0: CRC Errors: 3\n")


@PROPS
@given(damaged([NVLINK_S]), damaged([NVLINK_E]))
def test_nvlink_never_raises(status, errors):
    with no_hang():
        nvlink_parse.parse_status(status)
        nvlink_parse.parse_errors(errors)
    _verdict(nvlink.evaluate, status, errors, S.nvlink)


@PROPS
@given(junk)
def test_nvlink_is_never_ok_on_unreadable_text(text):
    r = _verdict(nvlink.evaluate, text, "", S.nvlink)
    assert r is None or r.status != "ok"


@PROPS
@given(damaged(TOPO_TEXTS))
def test_topo_parse_returns_a_topology_or_a_usage_error(text):
    with no_hang():
        try:
            topo = parse_topo(text, path="t.txt")
        except UsageError as e:
            assert str(e).startswith("t.txt")
            return
    assert topo.gpus and all(g.index == i for i, g in enumerate(topo.gpus))


@PROPS
@given(damaged(LSCPU_TEXTS))
def test_cpu_layout_parse_returns_a_layout_or_a_usage_error(text):
    with no_hang():
        try:
            parse_cpu_layout(text, path="l.txt")
        except UsageError:
            pass


# --- hostlists --------------------------------------------------------------------------------------------------

hostlist_text = st.text(st.sampled_from("n0123456789[]-,/ @x"), max_size=30) | st.builds(
    lambda p, a, b: f"{p}[{a}-{b}]", st.sampled_from(["n", "gpu", "a1b"]), st.integers(0, 10 ** 12),
    st.integers(0, 10 ** 12))


@PROPS
@given(hostlist_text)
def test_hostlist_expansion_is_bounded_and_matches_its_count(expr):
    with no_hang():
        try:
            n = hostlist.count(expr)
        except UsageError:
            return
        try:
            names = hostlist.expand(expr, limit=1000)
        except UsageError as e:
            assert n > 1000 or "bad hostlist" in str(e)
            return
    assert len(names) <= n <= 1000


# --- job specs and the renderer ---------------------------------------------------------------------------------

_line = st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), min_size=1, max_size=20)
_shellish = st.text(st.sampled_from("ab\\'\"#$` =-:;&|*?~!{}()[]<>\t%"), min_size=1, max_size=12)
value = _line | _shellish


@pytest.fixture(autouse=True, scope="module")
def _no_cache():
    old = os.environ.get("SLURMKIT_NO_CACHE")
    os.environ["SLURMKIT_NO_CACHE"] = "1"
    yield
    if old is None:
        os.environ.pop("SLURMKIT_NO_CACHE")
    else:
        os.environ["SLURMKIT_NO_CACHE"] = old


@PROPS
@given(name=value, account=value, qos=value, output=value, extra=value, opt=st.from_regex(r"\A[a-z][a-z-]{0,10}\Z"))
def test_every_sbatch_value_survives_slurms_parser_and_bash(name, account, qos, output, extra, opt):
    d = {"command": ["true"], "name": name, "account": account, "qos": qos, "output": output,
         "sbatch": [f"--{opt}={extra}"]}
    with no_hang():
        spec = specmod.loads(yaml.safe_dump(d, allow_unicode=True), "job.yaml")
        script = render.render(spec, S, spec_name="job.yaml").script
    got = [sbatch_arguments(ln[len("#SBATCH "):]) for ln in script.splitlines() if ln.startswith("#SBATCH ")]
    assert all(len(a) == 1 for a in got), got
    args = [a[0] for a in got]
    for o, v in (("--job-name", name), ("--account", account), ("--qos", qos), ("--output", output),
                 (f"--{opt}", extra)):
        assert f"{o}={v}" in args, (o, v, args)
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0


yaml_doc = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | value,
                        lambda c: st.lists(c, max_size=4) | st.dictionaries(value, c, max_size=4), max_leaves=20)
KEYS = [f.name for f in specmod.JobSpec.__fields__.values() if not f.metadata.get("internal")]


@PROPS
@given(doc=st.dictionaries(st.sampled_from(KEYS) | value, yaml_doc, max_size=6),
       sets=st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS + ["env.X", "preemption.grace", "x.y"]),
                               value), max_size=2),
       spec_name=value)
def test_any_spec_loads_or_says_why(doc, sets, spec_name):
    """Any YAML document, any --set, any file name: a JobSpec and a script bash accepts, or a UsageError."""
    text = yaml.safe_dump(doc, allow_unicode=True)
    with no_hang():
        try:
            spec = specmod.loads(text, "job.yaml", sets)
            script = render.render(spec, S, spec_name=spec_name + ".yaml").script
        except UsageError as e:
            assert "\n" not in str(e).split(": ", 1)[0]
            return
    if isinstance(spec.command, str):   # a string command is the user's shell text: it is as valid as they wrote it
        assume(subprocess.run(["bash", "-n"], input=spec.command, text=True, capture_output=True).returncode == 0)
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0
    header = script.split("\n# generated by slurmkit", 1)[0]
    assert script.count("\n#SBATCH ") == header.count("\n#SBATCH ")


@PROPS
@given(st.text(max_size=200))
def test_any_text_as_a_spec_never_raises_anything_else(text):
    with no_hang():
        try:
            specmod.loads(text, "job.yaml")
        except UsageError:
            pass


@hsettings(max_examples=20, deadline=None)
@given(width=st.integers(2, 12), depth=st.integers(2, 12), where=st.sampled_from(["key", "value", "command"]))
def test_alias_bombs_are_refused_fast(width, depth, where):
    assume(width ** depth > specmod.MAX_NODES)
    levels = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, depth):
        levels.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    bomb = f"*a{depth - 1}"
    body = {"key": f"env:\n  ? {bomb}\n  : v\n", "value": f"sweep:\n  X: {bomb}\n", "command": f"command: {bomb}\n"}
    text = "anchors:\n" + "".join(f"  {ln}\n" for ln in levels) + body[where]
    with no_hang(), pytest.raises(UsageError) as e:
        specmod.loads(text, "job.yaml")
    assert len(str(e.value)) < 500
