"""The prebuilt venv (payload.py): what a node's Python must answer to get it (pure; building it from a real
wheelhouse and installing it: tests/integration/test_install_prebuilt.py)."""
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkit.install import payload
from slurmkit.install.payload import PyId, misfit, parse_probe, pyvenv_cfg

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
