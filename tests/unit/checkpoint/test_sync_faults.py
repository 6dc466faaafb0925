"""Issue 20's sync items: a killed sync child is a failure handed on (4), an unreadable job record is covered by
the prolog's record or a retry/manual path (5), a full destination is not left full (7), two jobs of one name
keep each other's checkpoints (8), nothing to sync touches nothing and the count of what is left is right (9).
The dev-cluster halves (the real prolog/epilog, slurmctld stopped) are in tests/integration/test_sync_faults.py."""
import fcntl
import json
import os
import pwd
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import epilog as ep
from slurmkit.checkpoint import jobstate
from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint import sync as cs

from unit.checkpoint.test_sync import site_yaml

ROOT = os.geteuid() == 0
USER = "skg-alice"   # the conftest's sync_user


def mk(root, step, size=1000):
    d = os.path.join(root, f"step-{step:010d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "w.bin"), "wb") as f:
        f.write(os.urandom(size))
    mf.write(d, mf.build(d, step))
    return d


def visible(d):
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


@pytest.fixture
def job(sync_user):
    """A job of a real non-root user (the epilog drops to it), its dirs in a world-traversable /tmp dir."""
    pw = sync_user
    base = Path(tempfile.mkdtemp(prefix="sk-core-faults-", dir="/tmp"))
    base.chmod(0o755)
    src = base / "local" / USER / "42" / "ckpt"
    src.mkdir(parents=True)
    (base / "shared").mkdir()
    for p in (base / "local", base / "local" / USER, base / "local" / USER / "42", src, base / "shared"):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    s = config.loads(site_yaml(base, keep=2, extra="slurm:\n  timeout: 2\n"))
    env = {"SLURM_JOB_USER": USER, "SLURM_JOB_UID": str(pw.pw_uid), "SLURM_JOB_ID": "42",
           "SLURM_JOB_NAME": "train", "SLURMD_NODENAME": "n1"}

    def add(step, size=1000):
        d = mk(str(src), step, size)
        for dirpath, dirnames, filenames in os.walk(d):
            for n in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
                os.chown(n, pw.pw_uid, pw.pw_gid)
    yield {"settings": s, "env": env, "base": base, "src": src, "add": add, "pw": pw}
    subprocess.run(["rm", "-rf", str(base)], check=False)


def last_sync_record(base):
    return [r for r in healthlog.read(str(base / "health.jsonl")) if r["check"] == "checkpoint-sync"][-1]


# --- 4 -----------------------------------------------------------------------------------------------------

def _die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_child_is_a_failure_with_its_signal():
    me = pwd.getpwuid(os.getuid())
    rep = cs.run_as((me.pw_uid, me.pw_gid, me.pw_name), _die, timeout=30)
    assert rep["status"] == "failed" and rep["errors"] == ["sync child killed by SIGKILL"]
    assert rep["deferred"] == ["*"] and rep["child_signal"] == "SIGKILL"


def test_a_killed_epilog_sync_is_logged_and_handed_to_the_manual_path(job, monkeypatch):
    job["add"](1)
    monkeypatch.setattr(ep, "_job_sync_rel", _die)        # the child dies as the OOM killer would kill it
    rep = cs.sync_for_job(job["settings"], job["env"])
    assert rep["status"] == "failed" and "killed by SIGKILL" in rep["errors"][0]
    assert rep["finish"].startswith(f"manual: slurmkit sync --user {USER} --series 42 -- ")
    rec = last_sync_record(job["base"])
    assert rec["status"] == "fail" and rec["action"] == "deferred-manual"
    assert rec["reason"] == "sync child killed by SIGKILL" and rec["evidence"]["child_signal"] == "SIGKILL"


# --- 5 -----------------------------------------------------------------------------------------------------

def test_the_prolog_record_stands_in_for_an_unreadable_job_record(job):
    job["add"](1)
    env = dict(job["env"])
    del env["SLURM_JOB_NAME"]                                # the epilog is not given it, and no controller
    d = job["base"] / "state" / jobstate.DIRNAME
    d.mkdir(parents=True, mode=0o700)
    (d / "42.json").write_text(json.dumps({"job_id": "42", "vars": {"SLURM_JOB_NAME": "train"}}))
    (d / "42.json").chmod(0o600)
    rep = cs.sync_for_job(job["settings"], env)
    assert rep["status"] == "ok" and rep["copied"] == ["step-0000000001"], rep["errors"]
    assert visible(job["base"] / "shared" / USER / "train") == ["step-0000000001"]
    assert not (d / "42.json").exists()                      # done with: removed


def test_a_record_someone_else_could_write_is_ignored(job):
    d = job["base"] / "state" / jobstate.DIRNAME
    d.mkdir(parents=True, mode=0o700)
    (d / "42.json").write_text(json.dumps({"job_id": "42", "vars": {"SLURM_JOB_NAME": "evil"}}))
    (d / "42.json").chmod(0o666)
    assert jobstate.recorded(job["settings"], "42") == {}
    os.chown(d / "42.json", 65534, 65534)
    (d / "42.json").chmod(0o600)
    assert jobstate.recorded(job["settings"], "42") == {}


def test_no_record_and_no_controller_leaves_a_command_to_finish(job, monkeypatch):
    job["add"](1)
    env = dict(job["env"])
    del env["SLURM_JOB_NAME"]
    monkeypatch.setenv("PATH", "/nonexistent")             # no scontrol at all: the record cannot be read
    rep = cs.sync_for_job(job["settings"], env)
    assert rep["status"] == "failed" and rep["deferred"] == ["*"]
    assert rep["finish"].startswith("manual: once `scontrol show job 42` answers, run slurmkit sync")
    assert "with SLURM_JOB_NAME filled in" in rep["finish"]
    rec = last_sync_record(job["base"])
    assert rec["status"] == "fail" and rec["action"] == "deferred-manual"
    assert "$SLURM_JOB_NAME is not set" in rec["reason"] and "scontrol show job 42" in rec["evidence"]["finish"]


# --- 7 -----------------------------------------------------------------------------------------------------

@pytest.fixture
def small_fs():
    if not ROOT:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tempfile.mkdtemp(prefix="sk-core-tmpfs-", dir="/tmp")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield Path(mnt)
    subprocess.run(["umount", mnt], check=False)
    os.rmdir(mnt)


def test_a_full_destination_is_not_left_full_of_a_partial_copy(tmp_path, small_fs):
    src = tmp_path / "src"
    mk(str(src), 1, size=3 << 20)                           # 3 MiB into 2 MiB
    dst = small_fs / "ckpt"
    free_before = os.statvfs(small_fs).f_bavail
    rep = cs.sync_dir(str(src), str(dst), keep=2)
    assert rep["status"] == "failed" and "No space left on device" in rep["errors"][0]
    assert [n for n in os.listdir(dst) if n.startswith(".slurmkit-tmp-")] == []
    assert os.statvfs(small_fs).f_bavail >= free_before - 8  # the space is back (a few blocks of directories)
    rep = cs.sync_dir(str(src), str(dst), keep=2)            # a rerun fails the same way, and cleans up again
    assert rep["status"] == "failed" and os.statvfs(small_fs).f_bavail >= free_before - 8


# --- 8 -----------------------------------------------------------------------------------------------------

def test_two_jobs_of_one_name_do_not_prune_each_other(tmp_path):
    a, b, dst = tmp_path / "a", tmp_path / "b", tmp_path / "dst"
    for st in (5, 6):
        mk(str(a), st)
    for st in (1, 2):
        mk(str(b), st)
    assert cs.sync_dir(str(a), str(dst), keep=2, series="100")["copied"] == ["step-0000000006", "step-0000000005"]
    rep = cs.sync_dir(str(b), str(dst), keep=1, series="200")
    assert rep["status"] == "ok" and rep["copied"] == ["step-0000000002"] and rep["pruned"] == []
    assert rep["kept_other_jobs"] == ["step-0000000005", "step-0000000006"]
    assert visible(dst) == ["step-0000000002", "step-0000000005", "step-0000000006"]
    mk(str(b), 3)
    rep = cs.sync_dir(str(b), str(dst), keep=1, series="200")     # job 200 prunes its own, only
    assert rep["pruned"] == ["step-0000000002"] and rep["prune_reason"] == "keep=1: older than the newest 1 of job 200"
    assert visible(dst) == ["step-0000000003", "step-0000000005", "step-0000000006"]


def test_a_name_another_job_holds_is_not_replaced(tmp_path):
    a, b, dst = tmp_path / "a", tmp_path / "b", tmp_path / "dst"
    mk(str(a), 1)
    mk(str(b), 1)
    cs.sync_dir(str(a), str(dst), keep=2, series="100")
    before = (dst / "step-0000000001" / "w.bin").read_bytes()
    rep = cs.sync_dir(str(b), str(dst), keep=2, series="200")
    assert rep["status"] == "failed" and "another job (100); not replaced" in rep["errors"][0]
    assert (dst / "step-0000000001" / "w.bin").read_bytes() == before


def test_the_health_log_says_what_was_pruned_and_why(job):
    for st in (1, 2, 3):
        job["add"](st)
    rep = cs.sync_for_job(job["settings"], job["env"])
    assert rep["status"] == "ok" and rep["copied"] == ["step-0000000003", "step-0000000002"]
    job["add"](4)
    rep = cs.sync_for_job(job["settings"], job["env"])
    rec = last_sync_record(job["base"])
    assert rec["evidence"]["pruned"] == ["step-0000000002"]
    assert rec["evidence"]["prune_reason"] == "keep=2: older than the newest 2 of job 42"


# --- 9 -----------------------------------------------------------------------------------------------------

def test_nothing_to_sync_creates_nothing_at_dest(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst" / "alice" / "train"
    src.mkdir()
    rep = cs.sync_dir(str(src), str(dst), keep=2)
    assert rep["status"] == "ok" and rep["copied"] == [] and not (tmp_path / "dst").exists()


def test_the_count_left_is_the_count_left(job):
    for st in (1, 2):
        job["add"](st)
    dest = job["base"] / "shared" / USER / "train"
    dest.mkdir(parents=True)
    os.chown(dest, job["pw"].pw_uid, job["pw"].pw_gid)
    lock = os.open(dest / cs.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    os.fchown(lock, job["pw"].pw_uid, job["pw"].pw_gid)
    fcntl.flock(lock, fcntl.LOCK_EX)                         # another sync holds DEST for the whole budget
    try:
        rep = cs.sync_for_job(job["settings"], job["env"], budget=10.0)
    finally:
        os.close(lock)
    assert rep["status"] == "partial" and rep["deferred"] == ["step-0000000001", "step-0000000002"], rep["errors"]
    rec = last_sync_record(job["base"])
    assert rec["reason"].startswith("budget spent; 2 checkpoint(s) left for manual: slurmkit sync")
