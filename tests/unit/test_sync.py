"""The checkpoint sync on the local filesystem, as the calling user (privilege drop: test_sync_security.py)."""
import json
import os
import subprocess
import sys

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint import sync as cs

ENV = {"SLURM_JOB_USER": "alice", "SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "train", "SLURM_JOB_UID": "1000"}


def make_ckpt(root, step, files=None, complete=True):
    d = os.path.join(root, f"step-{step:010d}")
    files = files or {"model/shard-0.bin": os.urandom(100_000), "opt.pt": b"o" * 1000, "meta.json": b"{}"}
    for rel, data in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    if complete:
        mf.write(d, mf.build(d, step))
    return d


def visible(dest):
    return sorted(n for n in os.listdir(dest) if not n.startswith("."))


def assert_verified(dest):
    for n in visible(dest):
        m = mf.read(os.path.join(dest, n))
        assert m is not None, n
        assert mf.verify(os.path.join(dest, n), m) == [], n


# --- patterns ----------------------------------------------------------------------------------------------

def test_expand_substitutes_whitelisted_variables():
    assert cs.expand("/local/$SLURM_JOB_USER/${SLURM_JOB_ID}/ckpt", ENV) == "/local/alice/42/ckpt"
    assert cs.expand("s3://bkt/ckpt/$SLURM_JOB_USER/$SLURM_JOB_NAME", ENV) == "s3://bkt/ckpt/alice/train"


@pytest.mark.parametrize("pattern,env,msg", [
    ("/x/$HOME/ckpt", ENV, "not allowed"),
    ("/x/$SLURM_ARRAY_TASK_ID", ENV, "not set"),
    ("/x/$SLURM_JOB_NAME", dict(ENV, SLURM_JOB_NAME="../../etc"), "not a safe path component"),
    ("/x/$SLURM_JOB_NAME", dict(ENV, SLURM_JOB_NAME=".."), "not a safe path component"),
    ("relative/$SLURM_JOB_ID", ENV, "not an absolute path"),
    ("/x/../$SLURM_JOB_ID", ENV, "'..'"),
    ("s3://Bad_Bucket/x", ENV, "bucket"),
    ("", ENV, "no pattern"),
])
def test_expand_rejects_unsafe_patterns(pattern, env, msg):
    with pytest.raises(cs.SyncError, match=msg):
        cs.expand(pattern, env)


# --- plan (pure) -------------------------------------------------------------------------------------------

def test_plan_copies_newest_first_skips_unchanged_and_prunes_to_keep():
    m = lambda s: {"step": s, "algo": "sha256", "files": [{"path": "a", "size": 1, "hash": str(s)}]}  # noqa
    src = {"s1": m(1), "s2": m(2), "s3": m(3), "s4": m(4)}
    p = cs.plan(src, {"s1": m(1), "s2": m(2)}, keep=3)
    assert p["copy"] == ["s4", "s3"] and p["skip"] == ["s2"] and p["prune"] == ["s1"]
    # a changed checkpoint of the same name is copied again
    assert cs.plan({"s2": m(9)}, {"s2": m(2)}, keep=3)["copy"] == ["s2"]
    # the destination already holds newer ones: an old source checkpoint is not copied only to be pruned
    p = cs.plan({"s1": m(1)}, {"s5": m(5), "s6": m(6)}, keep=2)
    assert p["copy"] == [] and p["prune"] == []


# --- the copy ----------------------------------------------------------------------------------------------

def test_sync_copies_only_complete_checkpoints_verified(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    for s in (100, 200, 300):
        make_ckpt(src, s)
    make_ckpt(src, 400, complete=False)                       # half-written: no manifest
    make_ckpt(src, 500)
    os.rename(make_ckpt(src, 600), os.path.join(src, ".tmp-step-0000000600"))  # the helper's temp dir
    rep = cs.sync_dir(src, dst, keep=5)
    assert rep["status"] == "ok", rep
    assert visible(dst) == ["step-0000000100", "step-0000000200", "step-0000000300", "step-0000000500"]
    assert rep["incomplete"] == ["step-0000000400"]
    assert_verified(dst)
    assert rep["bytes"] == 4 * (100_000 + 1000 + 2)


def test_resync_of_unchanged_checkpoints_reads_no_data_and_keep_prunes_oldest(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    for s in (1, 2):
        make_ckpt(src, s)
    cs.sync_dir(src, dst, keep=2)
    # the source data of step 1 vanishes, its manifest stays: an unchanged checkpoint is skipped unread
    os.unlink(os.path.join(src, "step-0000000001", "opt.pt"))
    rep = cs.sync_dir(src, dst, keep=2)
    assert rep["copied"] == [] and sorted(rep["skipped"]) == ["step-0000000001", "step-0000000002"]
    make_ckpt(src, 3)
    rep = cs.sync_dir(src, dst, keep=2)
    assert rep["copied"] == ["step-0000000003"] and rep["pruned"] == ["step-0000000001"]
    assert visible(dst) == ["step-0000000002", "step-0000000003"]
    assert [n for n in os.listdir(dst) if n.startswith(cs.TMP_PREFIX) or n.startswith(cs.OLD_PREFIX)] == []


def test_corrupt_source_is_not_published(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    d = make_ckpt(src, 7)
    with open(os.path.join(d, "opt.pt"), "r+b") as f:  # same size, different bytes than the manifest says
        f.write(b"X")
    rep = cs.sync_dir(src, dst, keep=2)
    assert rep["status"] == "failed" and "verification failed" in rep["errors"][0]
    assert visible(dst) == []


def test_changed_checkpoint_replaces_the_old_copy(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_ckpt(src, 1)
    cs.sync_dir(src, dst, keep=2)
    make_ckpt(src, 1, files={"model/shard-0.bin": b"new"})  # rewritten in place, new manifest
    rep = cs.sync_dir(src, dst, keep=2)
    assert rep["copied"] == ["step-0000000001"]
    assert open(os.path.join(dst, "step-0000000001", "model", "shard-0.bin"), "rb").read() == b"new"
    assert_verified(dst)


def test_interrupted_copy_is_resumed_and_leftovers_cleaned(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    d = make_ckpt(src, 5)
    # an earlier run died mid-copy: one file done, one truncated, a stray file, and a stale manifest
    tmp = os.path.join(dst, cs.TMP_PREFIX + "step-0000000005")
    os.makedirs(os.path.join(tmp, "model"))
    with open(os.path.join(tmp, "opt.pt"), "wb") as f:
        f.write(open(os.path.join(d, "opt.pt"), "rb").read())
    with open(os.path.join(tmp, "model", "shard-0.bin"), "wb") as f:
        f.write(b"partial")
    open(os.path.join(tmp, "stray"), "w").close()
    os.makedirs(os.path.join(dst, cs.TMP_PREFIX + "step-0000000001"))  # a checkpoint no longer wanted
    os.makedirs(os.path.join(dst, cs.OLD_PREFIX + "step-0000000000"))  # a prune that died half-way
    rep = cs.sync_dir(src, dst, keep=2)
    assert rep["status"] == "ok", rep
    assert sorted(os.listdir(dst)) == [cs.LOCK_NAME, "step-0000000005"]
    assert not os.path.exists(os.path.join(dst, "step-0000000005", "stray"))
    assert_verified(dst)


def test_budget_defers_without_showing_a_partial_checkpoint(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    make_ckpt(src, 1)
    rep = cs.sync_dir(src, dst, keep=2, deadline=0.0)  # already spent
    assert rep["status"] == "partial" and rep["deferred"] == ["step-0000000001"]
    assert visible(dst) == []
    rep = cs.sync_dir(src, dst, keep=2)  # `slurmkit sync` later (or the background sync) finishes it
    assert rep["copied"] == ["step-0000000001"]
    assert_verified(dst)


def test_marker_checkpoints_get_a_manifest_built_at_sync_time(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    d = make_ckpt(src, 10, complete=False)
    open(os.path.join(d, "COMPLETE"), "w").close()
    make_ckpt(src, 20, complete=False)  # no marker: incomplete
    assert cs.sync_dir(src, dst, keep=3)["copied"] == []          # without the marker configured: nothing
    rep = cs.sync_dir(src, dst, keep=3, marker="COMPLETE")
    assert rep["copied"] == ["step-0000000010"] and rep["incomplete"] == ["step-0000000020"]
    man = mf.read(os.path.join(dst, "step-0000000010"))
    assert man["step"] == 10 and "COMPLETE" in [f["path"] for f in man["files"]]
    assert_verified(dst)
    assert cs.sync_dir(src, dst, keep=3, marker="COMPLETE")["skipped"] == ["step-0000000010"]


def test_symlinks_in_a_checkpoint_are_refused(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret")
    d = make_ckpt(src, 1, files={"a.bin": b"a"}, complete=False)
    os.symlink(str(secret), os.path.join(d, "b.bin"))
    man = mf.build(d, 1)
    size, digest = mf.hash_file(str(secret))
    man["files"].append({"path": "b.bin", "size": size, "hash": digest})  # a manifest naming the symlink
    mf.write(d, man)
    rep = cs.sync_dir(src, dst, keep=2)
    assert rep["status"] == "failed" and "symlink" in rep["errors"][0]
    assert visible(dst) == []
    # a symlinked directory on the way is refused too
    d2 = make_ckpt(src, 2, files={"a.bin": b"a"}, complete=False)
    os.makedirs(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "x").write_bytes(b"x")
    os.symlink(str(tmp_path / "elsewhere"), os.path.join(d2, "sub"))
    man = mf.build(d2, 2)
    man["files"].append({"path": "sub/x", "size": 1, "hash": mf.hash_file(str(tmp_path / "elsewhere" / "x"))[1]})
    mf.write(d2, man)
    rep = cs.sync_dir(src, dst, keep=2)
    assert any("symlink" in e for e in rep["errors"]) and visible(dst) == []


def test_full_disk_leaves_previous_checkpoints_and_next_run_cleans(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        src, dst = str(tmp_path / "src"), str(mnt / "dst")
        make_ckpt(src, 1, files={"a.bin": os.urandom(300_000)})
        assert cs.sync_dir(src, dst, keep=3)["copied"] == ["step-0000000001"]
        make_ckpt(src, 2, files={"a.bin": os.urandom(900_000)})   # does not fit
        rep = cs.sync_dir(src, dst, keep=3)
        assert rep["status"] == "failed" and "No space left" in " ".join(rep["errors"])
        assert visible(dst) == ["step-0000000001"]
        assert_verified(dst)
        os.unlink(os.path.join(src, "step-0000000002", mf.MANIFEST))  # the big one is gone from the plan
        rep = cs.sync_dir(src, dst, keep=3)
        assert rep["status"] == "ok" and not [n for n in os.listdir(dst) if n.startswith(cs.TMP_PREFIX)]
    finally:
        subprocess.run(["umount", str(mnt)])


# --- the job file, sync_for_job and the health log -----------------------------------------------------------

def settings_for(tmp_path, **sync):
    text = f"""
paths:
  health_log: {tmp_path}/health.jsonl
  state_dir: {tmp_path}/state
sync:
  enabled: true
  source: {tmp_path}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {tmp_path}/shared/$SLURM_JOB_USER/$SLURM_JOB_NAME
  keep: 3
  background: false
"""
    s = config.loads(text)
    for k, v in sync.items():
        setattr(s.sync, k, v)
    return s


def job_env():
    import pwd
    pw = pwd.getpwuid(os.getuid())
    return {"SLURM_JOB_USER": pw.pw_name, "SLURM_JOB_UID": str(pw.pw_uid), "SLURM_JOB_ID": "42",
            "SLURM_JOB_NAME": "train", "SLURMD_NODENAME": "n1"}


def test_sync_for_job_logs_to_the_health_log(tmp_path):
    s = settings_for(tmp_path)
    env = job_env()
    src = tmp_path / "local" / env["SLURM_JOB_USER"] / "42" / "ckpt"
    for st in (1, 2, 3, 4):
        make_ckpt(str(src), st)
    if os.geteuid() == 0:
        pytest.skip("as root, sync_for_job drops to the job's user: test_sync_security.py")
    rep = cs.sync_for_job(s, env)
    assert rep["status"] == "ok" and len(rep["copied"]) == 3
    recs = list(healthlog.read(str(tmp_path / "health.jsonl")))
    assert recs[-1]["context"] == "sync" and recs[-1]["action"] == "copied" and recs[-1]["job_id"] == 42


def test_sync_for_job_disabled_and_bad_pattern(tmp_path):
    s = settings_for(tmp_path)
    s.sync.enabled = False
    assert cs.sync_for_job(s, job_env())["status"] == "disabled"
    s = settings_for(tmp_path, dest="/shared/$HOME")
    rep = cs.sync_for_job(s, job_env())
    assert rep["status"] == "failed" and "not allowed" in rep["errors"][0]
    rec = list(healthlog.read(str(tmp_path / "health.jsonl")))[-1]
    assert rec["status"] == "fail" and "not allowed" in rec["reason"]


def test_job_file_narrows_and_bad_job_file_names_its_line(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    for st in (1, 2, 3, 4):
        make_ckpt(src, st)
    fields = config.SyncSettings(keep=3)
    (tmp_path / "src" / ".slurmkit-sync.yaml").write_text("keep: 1\nsubdir: run-a\n")
    rep = cs._job_sync(src, dst, fields, None)
    assert rep["copied"] == ["step-0000000004"] and visible(dst + "/run-a") == ["step-0000000004"]
    (tmp_path / "src" / ".slurmkit-sync.yaml").write_text("keep: 10\n")  # can only narrow: site keep 3 wins
    assert len(cs._job_sync(src, dst, fields, None)["copied"]) == 3
    (tmp_path / "src" / ".slurmkit-sync.yaml").write_text("subdir: ../../etc\n")
    rep = cs._job_sync(src, dst, fields, None)
    assert rep["status"] == "failed" and "subdir" in rep["errors"][0]
    (tmp_path / "src" / ".slurmkit-sync.yaml").write_text("keep: 1\nkepp: 2\n")
    rep = cs._job_sync(src, dst, fields, None)
    assert ".slurmkit-sync.yaml:2" in rep["errors"][0] and "did you mean 'keep'" in rep["errors"][0]
    (tmp_path / "src" / ".slurmkit-sync.yaml").write_text("enabled: false\n")
    assert cs._job_sync(src, dst, fields, None)["status"] == "disabled-by-job"


def test_epilog_import_path_is_light():
    code = ("import sys, slurmkit.checkpoint.sync, slurmkit.config; "
            "print(','.join(m for m in ('boto3', 'botocore', 'click', 'yaml', 'jinja2', 'paramiko') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


# --- the CLI -----------------------------------------------------------------------------------------------

def sk(*args, cwd=None):
    exe = os.path.join(os.path.dirname(sys.executable), "slurmkit")
    return subprocess.run([exe, *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, SLURMKIT_CONFIG="/dev/null"), timeout=60)


def test_cli_sync_dry_run_json_and_errors(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    for st in (1, 2, 3):
        make_ckpt(src, st)
    r = sk("sync", src, dst, "--keep", "2", "--dry-run")
    assert r.returncode == 0 and "would copy: step-0000000003, step-0000000002" in r.stdout
    assert not os.path.exists(dst)
    r = sk("sync", src, dst, "--keep", "2", "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["copied"] == ["step-0000000003", "step-0000000002"]
    r = sk("sync", src, dst, "--keep", "2")
    assert r.returncode == 0 and "unchanged 2" in r.stdout
    r = sk("sync", src, dst, "--keep", "0")
    assert r.returncode == 2
    r = sk("sync", src, "s3://Bad_Bucket/x")
    assert r.returncode == 2 and "bucket" in r.stderr and "Traceback" not in r.stderr


def _hang():
    import time
    time.sleep(30)
    return {"status": "ok"}


def test_a_hung_sync_child_is_killed_at_the_budget():
    import pwd
    import time
    me = pwd.getpwuid(os.getuid())
    t = time.monotonic()
    rep = cs.run_as((me.pw_uid, me.pw_gid, me.pw_name), _hang, timeout=0.5)  # a filesystem that never answers
    assert time.monotonic() - t < 5
    assert rep["killed"] and rep["deferred"] == ["*"] and rep["status"] == "partial"


def test_the_child_reports_its_failure():
    import pwd
    me = pwd.getpwuid(os.getuid())
    rep = cs.run_as((me.pw_uid, me.pw_gid, me.pw_name), lambda: 1 / 0, timeout=10)
    assert rep["status"] == "failed" and "ZeroDivisionError" in rep["errors"][0]
