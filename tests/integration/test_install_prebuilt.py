"""The prebuilt venv built from the real wheelhouse (pip wheel of this checkout, as `install` does) and
installed through LocalTransport: a node whose Python fits gets the tarball and a working venv (one whose Python
differs: tests/unit/install/test_payload.py; the sshd fleet tests run the same over SSH: test_install.py)."""
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.install import payload
from slurmkit.install.layout import layout
from slurmkit.install.push import Job, run_node
from slurmkit.install.ssh import LocalTransport

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from slurmkit.install import bundle
    inst = config.loads("install:\n  python: /usr/bin/python3\n").install
    wh = bundle.wheelhouse(inst)
    return wh, payload.build(wh, tmp_path_factory.mktemp("cache"))


def test_the_tarball_is_built_once_and_is_the_same_bytes_again(built, tmp_path):
    wh, pl = built
    again = payload.build(wh, pl.path.parent.parent)
    assert again.path == pl.path and again.sha256 == pl.sha256
    with tarfile.open(pl.path) as tf:
        members = tf.getmembers()
    assert all(m.uid == 0 and m.gid == 0 and not m.name.startswith(("/", "..")) for m in members)
    names = {m.name for m in members}
    assert "bin/slurmkit" in names and "bin/python" not in names and "pyvenv.cfg" not in names
    sp = payload.site_packages(pl.python)
    assert any(n.startswith(f"{sp}/slurmkit/__pycache__/") and n.endswith(".pyc") for n in names)
    assert "yaml._yaml" in pl.binary_modules


def test_a_node_whose_python_fits_gets_the_tarball_and_a_working_venv(built, tmp_path):
    wh, pl = built
    inst = config.loads(f"install:\n  root: {tmp_path}/nodes/{{node}}\n  python: {sys.executable}\n").install
    job = Job(inst, wh, b"#!/bin/sh\n", b"#!/bin/sh\n", b"slurm: {}\n", lambda n: LocalTransport(n), payload=pl)
    r = run_node("n1", job)
    assert r.status == "changed", r.error
    assert r.note.startswith(f"prebuilt venv unpacked: it fits the node's {pl.python.describe()}"), r.note
    lay = layout(inst, "n1")
    assert Path(lay.payload).read_bytes() == pl.data and not list(Path(lay.wheel_dir).glob("*.whl"))
    assert json.loads(Path(lay.stamp).read_text())["venv_from"] == "prebuilt"
    # the console script finds the venv's python through the link, whatever the venv's path
    v = subprocess.run([f"{lay.venv}/bin/slurmkit", "--version"], capture_output=True, text=True, timeout=60)
    assert v.stdout.strip() == f"slurmkit, version {wh.version}", v.stderr
    assert run_node("n1", job).status == "unchanged"


OTHER_PYTHON = Path("/root/.pyenv/versions/3.12.1/bin/python3.12")   # a real 3.12 beside this 3.11


@pytest.mark.skipif(not OTHER_PYTHON.exists(), reason="needs a second Python minor version")
@pytest.mark.parametrize("prebuilt", [True, False])
def test_a_node_whose_python_cannot_use_the_wheels_is_refused_and_the_dry_run_says_so(built, tmp_path, prebuilt):
    wh, pl = built
    compiled = [w.name for w in wh.to_install if "-cp3" in w.name]
    assert compiled, "the wheelhouse has a compiled wheel (PyYAML, MarkupSafe) for this test to mean anything"
    inst = config.loads(f"install:\n  root: {tmp_path}/nodes/{{node}}\n  python: {OTHER_PYTHON}\n").install
    for dry in (True, False):
        job = Job(inst, wh, b"#!/bin/sh\n", b"#!/bin/sh\n", b"slurm: {}\n", lambda n: LocalTransport(n),
                  payload=pl if prebuilt else None, dry_run=dry)
        r = run_node("n1", job)
        assert r.status == "failed" and r.error.startswith("refused: the node's Python 3.12.1 (cpython-312"), r.error
        assert "cannot use " in r.error and "install.python" in r.error
    assert not (tmp_path / "nodes" / "n1" / "opt").exists()        # nothing staged, nothing built
