"""The prebuilt venv built from the real wheelhouse (pip wheel of this checkout, as `install` does) and
installed through LocalTransport: a node whose Python fits gets the tarball and a working venv (one whose Python
differs: tests/unit/test_install_payload.py; the sshd fleet tests run the same over SSH: test_install.py)."""
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
    assert r.status == "changed" and r.note == "", r.error
    lay = layout(inst, "n1")
    assert Path(lay.payload).read_bytes() == pl.data and not list(Path(lay.wheel_dir).glob("*.whl"))
    assert json.loads(Path(lay.stamp).read_text())["venv_from"] == "prebuilt"
    # the console script finds the venv's python through the link, whatever the venv's path
    v = subprocess.run([f"{lay.venv}/bin/slurmkit", "--version"], capture_output=True, text=True, timeout=60)
    assert v.stdout.strip() == f"slurmkit, version {wh.version}", v.stderr
    assert run_node("n1", job).status == "unchanged"
