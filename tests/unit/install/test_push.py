"""stage -> verify -> commit, the venv step and rollback, on this machine's filesystem through LocalTransport
(the same Transport interface the paramiko edge implements; the sshd integration tests run the real thing)."""
import json
import os
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.install.bundle import Artifact, Wheelhouse
from slurmkit.install.layout import COMPLETE, PREV, layout
from slurmkit.install.push import Job, run_node, stage
from slurmkit.install.ssh import LocalTransport, NodeError


def tmp_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if ".slurmkit-tmp-" in p.name)


class FailingPut(LocalTransport):
    """Writes half of the n-th upload, then fails (a full disk, a dropped connection)."""

    def __init__(self, fail_at: int):
        super().__init__("n1")
        self.puts, self.fail_at = 0, fail_at

    def put(self, data, path, mode):
        self.puts += 1
        if self.puts == self.fail_at:
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            raise NodeError(f"upload {path}: No space left on device")
        super().put(data, path, mode)


class Corrupting(LocalTransport):
    def put(self, data, path, mode):
        super().put(data[:-1] + b"X", path, mode)


def test_a_failed_upload_leaves_no_staged_file(tmp_path):
    arts = [Artifact("config", str(tmp_path / "a"), b"a" * 100, 0o644),
            Artifact("prolog", str(tmp_path / "b"), b"b" * 100, 0o755)]
    with pytest.raises(NodeError, match="No space left"):
        stage(FailingPut(2), arts, "t0")
    assert list(tmp_path.iterdir()) == []


def test_a_staged_file_whose_hash_differs_is_removed_and_nothing_committed(tmp_path):
    arts = [Artifact("config", str(tmp_path / "a"), b"hello", 0o644)]
    with pytest.raises(NodeError, match="staged copy has sha256"):
        stage(Corrupting("n1"), arts, "t0")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def fake_node(tmp_path):
    """A node (under tmp_path/nodes/n1) whose venv for this synthetic wheelhouse is already built."""
    whd = tmp_path / "wh"
    whd.mkdir()
    for name in ("slurmkit-0.1.0-py3-none-any.whl", "installer-1.1.0-py3-none-any.whl"):
        (whd / name).write_bytes(b"synthetic " + name.encode())
    wh = Wheelhouse(whd, tuple(sorted(whd.glob("*.whl"))), "0.1.0")
    inst = config.loads(f"install:\n  root: {tmp_path}/nodes/{{node}}\n  python: /usr/bin/python3\n").install
    lay = layout(inst, "n1")
    vdir = Path(lay.venv_for(wh.bundle_id))
    vdir.mkdir(parents=True)
    (vdir / COMPLETE).write_text(vdir.name + "\n")
    os.symlink(vdir.name, lay.venv)

    def job(prolog=b"#!/bin/sh\n# v1\n", cfg=b"slurm:\n  timeout: 5\n", **kw):
        return Job(inst, wh, prolog, b"#!/bin/sh\n", cfg, lambda n: LocalTransport(n), **kw)
    return lay, job, tmp_path / "nodes" / "n1"


def test_install_rerun_update_and_rollback_on_a_local_root(fake_node):
    lay, job, root = fake_node
    r = run_node("n1", job())
    assert r.status == "changed", r.error
    assert b"# v1" in Path(lay.prolog).read_bytes() and os.stat(lay.prolog).st_mode & 0o777 == 0o755
    before = {p: os.stat(p).st_ino for p in (lay.prolog, lay.config, lay.stamp)}
    assert run_node("n1", job()).status == "unchanged"
    assert {p: os.stat(p).st_ino for p in before} == before          # a rerun rewrites nothing

    dry = run_node("n1", job(prolog=b"#!/bin/sh\n# v2\n", dry_run=True))
    assert dry.status == "would-change" and [c.path for c in dry.changes] == [lay.prolog, lay.stamp]
    assert b"# v1" in Path(lay.prolog).read_bytes()                     # --dry-run changed nothing

    r = run_node("n1", job(prolog=b"#!/bin/sh\n# v2\n"))
    assert r.status == "changed" and b"# v2" in Path(lay.prolog).read_bytes()
    assert b"# v1" in Path(lay.prolog + PREV).read_bytes()
    v2_stamp = Path(lay.stamp).read_bytes()

    r = run_node("n1", job(do_rollback=True))
    assert r.status == "rolled-back", r.error
    assert b"# v1" in Path(lay.prolog).read_bytes()
    assert json.loads(Path(lay.stamp + PREV).read_bytes()) == json.loads(v2_stamp)
    assert tmp_files(root) == []


def test_a_venv_that_does_not_build_leaves_the_live_files_as_they_were(fake_node, tmp_path):
    lay, job, root = fake_node
    assert run_node("n1", job()).status == "changed"
    link = os.readlink(lay.venv)
    (tmp_path / "wh" / "slurmkit-0.1.0-py3-none-any.whl").write_bytes(b"not a zip: a new, broken build")
    r = run_node("n1", job(prolog=b"#!/bin/sh\n# v2\n"))
    assert r.status == "failed" and "installer" in r.error
    assert b"# v1" in Path(lay.prolog).read_bytes()
    assert tmp_files(root) == []
    assert os.readlink(lay.venv) == link             # the live venv is the old one
    assert (Path(lay.venv) / COMPLETE).exists()


def test_a_node_keeps_the_live_and_the_previous_venv_only(fake_node, tmp_path):
    lay, job, root = fake_node
    assert run_node("n1", job()).status == "changed"
    first = os.readlink(lay.venv)
    venvs = root / "opt" / "slurmkit"
    # two newer bundles, each "built" already (their completion marker present), installed in turn
    for i in (2, 3):
        (tmp_path / "wh" / "installer-1.1.0-py3-none-any.whl").write_bytes(f"synthetic v{i}".encode())
        j = job()
        vdir = Path(lay.venv_for(j.wheelhouse.bundle_id))
        vdir.mkdir()
        (vdir / COMPLETE).write_text(vdir.name + "\n")
        r = run_node("n1", j)
        assert r.status == "changed", r.error
        assert os.readlink(lay.venv) == vdir.name
    assert sorted(p.name for p in venvs.glob("venv-*")) == sorted([os.readlink(lay.venv),
                                                                   os.readlink(lay.venv + PREV)])
    assert first not in [p.name for p in venvs.glob("venv-*")]


def test_a_failed_verify_says_which_check_failed_and_why():
    from slurmkit.install.push import verify_reason
    report = {"results": [{"check": "xid", "status": "ok"},
                          {"check": "ecc", "status": "fail", "reason": "GPU 0: 2 volatile uncorrectable errors"}]}
    assert verify_reason(1, report, []) == "ecc: GPU 0: 2 volatile uncorrectable errors"
    assert verify_reason(2, None, ["x", "slurmkit: error: config file not found"]) == \
        "slurmkit: error: config file not found"
    assert verify_reason(127, None, []) == "slurmkit check exited 127"
    assert verify_reason(0, report, []) is None
