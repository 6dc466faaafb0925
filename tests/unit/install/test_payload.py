"""The prebuilt venv (payload.py): what a node's Python must answer to get it (pure; building it from a real
wheelhouse and installing it: tests/integration/test_install_prebuilt.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkit.install import payload
from slurmkit.install.payload import Payload, PyId, misfit, parse_probe, pyvenv_cfg
from slurmkit.install.push import run_node
from slurmkit.install.ssh import LocalTransport, RunResult
from slurmkit.record import replace
from unit.install.test_push import fake_node  # noqa: F401  (the fixture: a node under tmp_path, its venv built)

HERE = payload.here()


def probe_here() -> PyId:
    r = subprocess.run([sys.executable, "-I", "-c", payload.PROBE], capture_output=True, text=True, timeout=60)
    return parse_probe(r.stdout)


def test_the_probe_run_by_this_python_describes_it():
    got = probe_here()
    assert (got.cache_tag, got.soabi, got.machine, got.version) == \
        (HERE.cache_tag, HERE.soabi, HERE.machine, HERE.version)
    assert os.path.isabs(got.base_executable) and misfit(HERE, got) is None


def test_another_version_abi_or_machine_does_not_fit():
    other = [PyId("cpython-312", "cpython-312-x86_64-linux-gnu", HERE.machine, "3.12.1", "/usr/bin/python3.12"),
             PyId(HERE.cache_tag, HERE.soabi + "t", HERE.machine, HERE.version, "/usr/bin/python3"),
             PyId(HERE.cache_tag, HERE.soabi, "aarch64" if HERE.machine != "aarch64" else "x86_64", HERE.version,
                  "/usr/bin/python3")]
    reasons = [misfit(HERE, o) for o in other]
    assert all(reasons) and "implementation/version" in reasons[0] and "ABI" in reasons[1] and \
        "machine" in reasons[2]
    # another patch release or another interpreter path fits: bytecode and ABI are per minor version
    assert misfit(HERE, PyId(HERE.cache_tag, HERE.soabi, HERE.machine, HERE.version.rsplit(".", 1)[0] + ".99",
                             "/opt/py/bin/python3")) is None


def test_pyvenv_cfg_names_the_nodes_interpreter():
    cfg = pyvenv_cfg(PyId("cpython-311", "x", "x86_64", "3.11.2", "/usr/bin/python3.11")).decode()
    assert cfg.splitlines() == ["home = /usr/bin", "include-system-site-packages = false", "version = 3.11.2",
                                "executable = /usr/bin/python3.11"]


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n  ...\nSyntaxError",
                                  '{"cache_tag": "cpython-311"}', "[1, 2]",
                                  json.dumps({"cache_tag": "c", "soabi": "s", "machine": "m", "version": "3.11.2",
                                              "base_executable": "python3"})])
def test_a_probe_answer_that_is_not_one_is_an_error(text):
    with pytest.raises(ValueError, match="probe"):
        parse_probe(text)


@given(st.text(max_size=300))
def test_parse_probe_answers_or_raises_valueerror(text):
    try:
        got = parse_probe(text)
    except ValueError:
        return
    assert got.base_executable.startswith("/")


class OtherPython(LocalTransport):
    """A node whose python3 is another minor version (synthetic: the probe's answer is replaced)."""

    def run(self, argv, timeout=None):
        if argv[1:3] == ["-I", "-c"] and argv[3] == payload.PROBE:
            doc = {"cache_tag": "cpython-399", "soabi": "cpython-399-x86_64-linux-gnu", "machine": HERE.machine,
                   "version": "3.99.0", "base_executable": "/usr/bin/python3.99"}
            return RunResult(tuple(argv), 0, json.dumps(doc) + "\n", "")
        return super().run(argv, timeout)


def test_a_node_whose_python_differs_gets_the_wheels_instead(fake_node, tmp_path):
    lay, job, root = fake_node      # synthetic wheels whose venv is "built" already: the choice is the point
    j = job()
    synthetic = Payload(tmp_path / "unused.tar.gz", "0" * 64, HERE, j.wheelhouse.bundle_id, b"synthetic tarball")
    j = replace(j, payload=synthetic, connect=lambda n: OtherPython(n))
    r = run_node("n1", j)
    assert r.status == "changed", r.error
    assert "from the wheels" in r.note and "3.99.0" in r.note
    assert not Path(lay.payload).exists()
    assert sorted(p.name for p in Path(lay.wheel_dir).iterdir()) == \
        sorted(w.name for w in j.wheelhouse.wheels)
    assert json.loads(Path(lay.stamp).read_text())["venv_from"] == "wheels"
    again = run_node("n1", j)
    assert again.status == "unchanged" and again.changes == []


def test_a_wheel_built_for_another_python_is_refused_not_installed_on_its_fallback():
    from slurmkit.install.payload import venv_choice, wheel_misfit

    py311 = PyId("cpython-311", "cpython-311-x86_64-linux-gnu", "x86_64", "3.11.7", "/usr/bin/python3.11")
    py312 = PyId("cpython-312", "cpython-312-x86_64-linux-gnu", "x86_64", "3.12.3", "/usr/bin/python3.12")
    arm = PyId("cpython-311", "cpython-311-aarch64-linux-gnu", "aarch64", "3.11.2", "/usr/bin/python3")
    yaml311 = "PyYAML-6.0.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    for ok in ("click-8.1.7-py3-none-any.whl", yaml311, "cryptography-42.0.5-cp39-abi3-manylinux_2_28_x86_64.whl"):
        assert wheel_misfit(ok, py311) is None, ok
    assert wheel_misfit(yaml311, py312) == ("built for cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64, "
                                            "the node runs Python 3.12.3 (cpython-312-x86_64-linux-gnu, x86_64)")
    assert wheel_misfit(yaml311, arm) is not None
    wheels = [Path("click-8.1.7-py3-none-any.whl"), Path(yaml311),
              Path("MarkupSafe-2.1.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")]
    with pytest.raises(ValueError) as e:
        venv_choice(None, wheels, py312)
    assert str(e.value).startswith("refused: the node's Python 3.12.3 (cpython-312-x86_64-linux-gnu, x86_64) "
                                   f"cannot use {yaml311}") and "(and 1 more)" in str(e.value)
    assert venv_choice(None, wheels, py311) == (False, "venv built on the node from the wheels "
                                                       "(Python 3.11.7 (cpython-311-x86_64-linux-gnu, x86_64))")


def test_a_node_python_other_users_cannot_run_is_warned_about(tmp_path):
    from slurmkit.install.payload import venv_choice

    private = tmp_path / "home"                          # synthetic: a pyenv Python under a 0700 home
    (private / "bin").mkdir(parents=True)
    exe = private / "bin" / "python3"
    exe.symlink_to(sys.executable)
    os.chmod(private, 0o700)
    code = payload.PROBE.replace('getattr(sys, "_base_executable", "") or sys.executable', repr(str(private / "bin")))
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert parse_probe(r.stdout).shut == str(private)
    node = replace(HERE, shut=str(private))
    fits, note = venv_choice(None, [], node)
    assert "warning: other users cannot run" in note and "/usr/bin/python3" in note
    assert "warning" not in venv_choice(None, [], HERE)[1]
