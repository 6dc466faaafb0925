"""The checkpoint sync on the local filesystem: as the calling user, against hostile or careless input (issue 17),
and as root dropping to the job's user (the privilege drop, at the end)."""
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import threading

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import manifest as mf, sync as cs

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

def site_yaml(base, *, keep=3, background=False, extra="") -> str:
    """The sync tests' site config: the health log, state, and a sync from node-local SOURCE to a shared DEST."""
    return f"""
paths:
  health_log: {base}/health.jsonl
  state_dir: {base}/state
sync:
  enabled: true
  source: {base}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {base}/shared/$SLURM_JOB_USER/$SLURM_JOB_NAME
  keep: {keep}
  background: {str(background).lower()}
""" + extra


def settings_for(tmp_path, **sync):
    s = config.loads(site_yaml(tmp_path))
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
        pytest.skip("as root, sync_for_job drops to the job's user: the privilege-drop tests below")
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


# ==============================================================================================================
# Issue 17's sync items (hostile or careless users), folded from test_sync_hardening.py
# Issue 17's sync items, as a hostile or careless user would meet them: S1 (nothing under DEST followed, a
# planted temporary removed, a root sync refusing another user's DEST), S3 (the manual hint pastes safely), D1
# (overlapping SOURCE and DEST refused), H5 (an unsupported manifest algorithm is an error, never a hang), H6 (a
# huge manifest is refused by a documented limit).
# ==============================================================================================================

ROOT = os.geteuid() == 0


def mk(root, step, files):
    d = os.path.join(root, f"step-{step:010d}")
    for rel, data in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    mf.write(d, mf.build(d, step))
    return d


# --- S1 ----------------------------------------------------------------------------------------------------

def test_a_symlink_planted_in_a_resumable_temporary_is_never_written_through(tmp_path):
    src, dst, victim = tmp_path / "src", tmp_path / "dst", tmp_path / "victim"
    victim.mkdir()
    mk(str(src), 1, {"d/authorized_keys": b"ssh-ed25519 AAAA attacker\n"})
    tmp = dst / ".slurmkit-tmp-step-0000000001"
    tmp.mkdir(parents=True)
    os.symlink(victim, tmp / "d")
    rep = cs.sync_dir(str(src), str(dst), keep=3)
    assert os.listdir(victim) == []                                   # nothing written outside DEST
    assert rep["status"] == "ok" and rep["copied"] == ["step-0000000001"]
    out = dst / "step-0000000001" / "d"
    assert not out.is_symlink() and (out / "authorized_keys").read_bytes().endswith(b"attacker\n")
    assert mf.verify(str(dst / "step-0000000001"), mf.read(str(dst / "step-0000000001"))) == []


def test_a_symlinked_subdirectory_swapped_in_is_refused_not_followed(tmp_path):
    # the same attack one level deeper, on a file the manifest lists below a planted link
    src, dst, victim = tmp_path / "src", tmp_path / "dst", tmp_path / "victim"
    victim.mkdir()
    mk(str(src), 1, {"a/b/c.bin": b"x" * 10})
    tmp = dst / ".slurmkit-tmp-step-0000000001" / "a"
    tmp.mkdir(parents=True)
    os.symlink(victim, tmp / "b")
    rep = cs.sync_dir(str(src), str(dst), keep=3)
    assert os.listdir(victim) == [] and rep["status"] == "ok"
    assert (dst / "step-0000000001" / "a" / "b" / "c.bin").read_bytes() == b"x" * 10


@pytest.mark.skipif(not ROOT, reason="needs root: a temporary owned by another user")
def test_a_temporary_owned_by_someone_else_is_removed_not_resumed(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    mk(str(src), 1, {"w.bin": b"good"})
    tmp = dst / ".slurmkit-tmp-step-0000000001"
    tmp.mkdir(parents=True)
    (tmp / "w.bin").write_bytes(b"evil")
    os.chown(tmp, 65534, 65534)
    os.chown(tmp / "w.bin", 65534, 65534)
    rep = cs.sync_dir(str(src), str(dst), keep=3)
    assert rep["status"] == "ok" and (dst / "step-0000000001" / "w.bin").read_bytes() == b"good"
    assert os.stat(dst / "step-0000000001").st_uid == 0


@pytest.mark.skipif(not ROOT, reason="needs root: a root sync without --user")
def test_a_root_sync_without_user_refuses_a_dest_owned_by_another_user(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    mk(str(src), 1, {"w.bin": b"w"})
    dst.mkdir()
    os.chown(dst, 65534, 65534)
    r = sk("sync", str(src), str(dst))
    assert r.returncode == 2, r.stderr
    assert f"DEST {dst} belongs to uid 65534: as root, sync as that user with --user" in r.stderr
    assert os.listdir(dst) == []
    r = sk("sync", str(src), str(dst / "not-yet" / "there"))       # the nearest existing ancestor counts
    assert r.returncode == 2 and "belongs to uid 65534" in r.stderr


# --- S3 ----------------------------------------------------------------------------------------------------

def test_the_manual_hint_is_shell_quoted_and_names_the_user():
    src, dst = "/local/alice/42/ckpt", "/shared/alice/x;echo INJECTED;true"
    hint = cs.manual_command(src, dst, (1000, 1000, "alice"), {})
    assert shlex.split(hint) == ["slurmkit", "sync", "--user", "alice", "--", src, dst]
    assert "INJECTED;true'" in hint            # quoted: pasting it runs slurmkit, never `echo`
    out = subprocess.run(["bash", "-c", f"slurmkit() {{ printf '%s\\n' \"$@\"; }}; {hint}"],
                         capture_output=True, text=True, timeout=30).stdout
    assert out.splitlines() == ["sync", "--user", "alice", "--", src, dst]


# --- D1 ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["same", "symlink", "dest-inside", "src-inside"])
def test_overlapping_source_and_dest_are_refused(tmp_path, how):
    base = tmp_path / "ck"
    for st in (1, 2, 3):
        mk(str(base), st, {"w.bin": b"w"})
    if how == "same":
        src, dst = base, base
    elif how == "symlink":
        src, dst = base, tmp_path / "link"
        os.symlink(base, dst)
    elif how == "dest-inside":
        src, dst = base, base / "backup"
    else:
        src, dst = base / "step-0000000001", base
    r = sk("sync", str(src), str(dst), "--keep", "1")
    assert r.returncode == 2 and "overlap" in r.stderr, r.stderr
    rep = cs.sync_dir(str(src), str(dst), keep=1)
    assert rep["status"] == "failed" and "overlap" in rep["errors"][0]
    assert sorted(n for n in os.listdir(base) if n.startswith("step-")) == [
        "step-0000000001", "step-0000000002", "step-0000000003"]         # nothing pruned


# --- H5 / H6 -----------------------------------------------------------------------------------------------

def _run_bounded(fn, seconds=120):
    """fn() on a thread; a hang fails the test after `seconds` instead of hanging the suite."""
    out = {}

    def run():
        try:
            out["rep"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
            out["exc"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "sync hung"
    if "exc" in out:
        raise out["exc"]
    return out["rep"]


@pytest.mark.parametrize("algo", ["shake_128", "whirlpool-9000"])
def test_an_unsupported_manifest_algorithm_is_a_clear_error_not_a_hang(tmp_path, algo):
    src, dst = tmp_path / "src", tmp_path / "dst"
    d = mk(str(src), 1, {"w.bin": b"w" * (40 << 20)})   # large: hashed by the second thread
    man = mf.read(d)
    man["algo"] = algo
    (tmp_path / "src" / "step-0000000001" / mf.MANIFEST).write_text(json.dumps(man))
    rep = _run_bounded(lambda: cs.sync_dir(str(src), str(dst), keep=3))
    assert rep["status"] == "failed" and rep["copied"] == []
    assert f"step-0000000001: {mf.MANIFEST}: unsupported hash algorithm {algo!r}" in rep["errors"][0]


def test_a_dying_hash_thread_never_leaves_the_copier_waiting(tmp_path):
    # below the manifest check: the engine itself, given an algorithm whose digest raises at the end
    from slurmkit.checkpoint import engine
    s = tmp_path / "s"
    s.write_bytes(b"z" * (40 << 20))
    sfd = os.open(s, os.O_RDONLY)
    dfd = os.open(tmp_path / "d", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(TypeError):
            _run_bounded(lambda: engine._copy_verify(sfd, dfd, 40 << 20, "shake_128", None, None))
    finally:
        os.close(sfd)
        os.close(dfd)


def test_a_huge_manifest_is_refused_by_its_documented_limit(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    d = mk(str(src), 1, {"w.bin": b"w"})
    man = mf.read(d)
    man["files"] = [{"path": f"f{i}", "size": 0, "hash": "0" * 64} for i in range(500_000)]
    with open(os.path.join(d, mf.MANIFEST), "w") as f:
        json.dump(man, f)
    rep = _run_bounded(lambda: cs.sync_dir(str(src), str(dst), keep=3))
    assert rep["status"] == "failed"
    assert f"500000 files listed, over the limit of {mf.MAX_FILES}" in rep["errors"][0]
    assert not dst.exists()                    # nothing to sync: DEST untouched


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_copies_that_run_ahead_of_their_hashes_wait_and_never_deadlock(tmp_path, monkeypatch, workers):
    # the verifier lets the copies run at most VERIFY_LAG bytes / VERIFY_FILES files ahead of the hashes: made
    # tiny here, so every copy waits on the hashes many times (large files in steps, many small files)
    from slurmkit.checkpoint import engine
    monkeypatch.setattr(engine, "VERIFY_LAG", 1 << 20)
    monkeypatch.setattr(engine, "VERIFY_FILES", 2)
    monkeypatch.setattr(engine, "VERIFY_CHUNK", 256 << 10)
    files = {f"small/{i:02d}.pt": os.urandom(1000 + i) for i in range(40)}
    files.update({f"big{i}.bin": os.urandom(3 << 20) for i in range(3)})
    src, dst = tmp_path / "src", tmp_path / "dst"
    d = mk(str(src), 1, files)
    rep = _run_bounded(lambda: cs.sync_dir(str(src), str(dst), keep=3, workers=workers))
    assert rep["copied"] == ["step-0000000001"] and rep["errors"] == []
    assert mf.verify(str(dst / "step-0000000001"), mf.read(d)) == []
    # the same, with one large file whose bytes no longer match its manifest: refused, nothing published
    with open(os.path.join(d, "big1.bin"), "r+b") as f:
        f.seek(2 << 20)
        b = f.read(1)
        f.seek(2 << 20)
        f.write(bytes([b[0] ^ 0xFF]))  # a byte that differs (a fixed b"X" was already there one time in 256)
    os.utime(d)
    src2 = tmp_path / "src2"
    os.rename(src, src2)
    rep = _run_bounded(lambda: cs.sync_dir(str(src2), str(tmp_path / "dst2"), keep=3, workers=workers))
    assert rep["status"] == "failed" and "big1.bin: verification failed at the destination" in rep["errors"][0]
    assert not (tmp_path / "dst2" / "step-0000000001").exists()


def test_a_file_changed_in_place_with_its_size_and_mtime_kept_is_never_read_as_unchanged(tmp_path):
    """Does the sync trust a size+mtime match (a change within one timestamp tick)? It must not: every byte that
    reaches DEST is hashed against the manifest, and what is already at DEST is compared by hash, never by stat.
    Synthetic: a byte flipped after the save, the file's mtime set back to the nanosecond."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    d = mk(str(src), 1, {"w.bin": os.urandom(1 << 20)})
    p = os.path.join(d, "w.bin")
    st = os.stat(p)
    with open(p, "r+b") as f:
        f.seek(4096)
        b = f.read(1)
        f.seek(4096)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(p).st_size, os.stat(p).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    rep = cs.sync_dir(str(src), str(dst), keep=3)
    assert rep["status"] == "failed" and "w.bin: verification failed at the destination" in rep["errors"][0], rep
    assert not (dst / "step-0000000001").exists()


# ==============================================================================================================
# The privilege drop (needs root), folded from test_sync_security.py
# Root syncs a user's checkpoints by dropping to that user: symlinks to root-only files or to another user's
# files copy nothing. Needs root (the epilog's situation) and creates two test users with useradd when missing.
# ==============================================================================================================

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the sync drops root to the job's user")
ALICE, BOB = "skg-alice", "skg-bob"


def ensure_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


@pytest.fixture
def world():
    import tempfile
    from pathlib import Path
    alice, bob = ensure_user(ALICE), ensure_user(BOB)
    base = Path(tempfile.mkdtemp(prefix="slurmkit-sec-", dir="/tmp"))  # pytest's tmp is 0700 root: not for alice
    os.chmod(base, 0o755)
    # a root-only secret and a file of bob's that only bob may read
    root_secret = base / "root-only"
    root_secret.write_bytes(b"root secret")
    os.chmod(root_secret, 0o600)
    bob_home = base / "bob"
    bob_home.mkdir(mode=0o700)
    bob_file = bob_home / "weights.bin"
    bob_file.write_bytes(b"bob's weights")
    bob_ckpt = bob_home / "step-0000000009"
    bob_ckpt.mkdir()
    (bob_ckpt / "w.bin").write_bytes(b"bob ckpt")
    mf.write(str(bob_ckpt), mf.build(str(bob_ckpt), 9))
    for p in (bob_home, bob_file, bob_ckpt, bob_ckpt / "w.bin", bob_ckpt / mf.MANIFEST):
        os.chown(p, bob.pw_uid, bob.pw_gid)
    os.chmod(bob_file, 0o600)
    # alice's source, written by alice
    src = base / "local" / ALICE / "77" / "ckpt"
    src.mkdir(parents=True)
    good = src / "step-0000000001"
    good.mkdir()
    (good / "model.bin").write_bytes(os.urandom(50_000))
    mf.write(str(good), mf.build(str(good), 1))
    # step 2: a manifest that names symlinks to the root-only file and to bob's file (hashes as root sees them)
    evil = src / "step-0000000002"
    evil.mkdir()
    (evil / "model.bin").write_bytes(b"fine")
    os.symlink(str(root_secret), evil / "shadow")
    os.symlink(str(bob_file), evil / "bobs.bin")
    man = mf.build(str(evil), 2)
    for rel, target in (("shadow", root_secret), ("bobs.bin", bob_file)):
        size, digest = mf.hash_file(str(target))
        man["files"].append({"path": rel, "size": size, "hash": digest})
    mf.write(str(evil), man)
    # step 3: a marker checkpoint holding the same symlinks (not in the manifest built at sync time)
    marked = src / "step-0000000003"
    marked.mkdir()
    (marked / "model.bin").write_bytes(b"marked")
    os.symlink(str(root_secret), marked / "shadow")
    os.symlink(str(bob_file), marked / "bobs.bin")
    (marked / "DONE").write_bytes(b"")
    # step 4: the checkpoint directory itself is a symlink to bob's checkpoint
    os.symlink(str(bob_ckpt), src / "step-0000000004")
    for dirpath, dirnames, filenames in os.walk(base / "local"):
        for n in [dirpath, *[os.path.join(dirpath, x) for x in dirnames + filenames]]:
            os.lchown(n, alice.pw_uid, alice.pw_gid)
    shared = base / "shared"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    yield {"base": base, "src": src, "shared": shared, "alice": alice, "bob": bob}
    shutil.rmtree(base, ignore_errors=True)


def settings(base, marker=None):
    s = config.loads(site_yaml(base, keep=5))
    s.sync.marker = marker
    return s


def env(user):
    return {"SLURM_JOB_USER": user.pw_name, "SLURM_JOB_UID": str(user.pw_uid), "SLURM_JOB_GID": str(user.pw_gid),
            "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "train", "SLURMD_NODENAME": "n1"}


def all_bytes(root):
    out = b""
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            out += open(os.path.join(dirpath, n), "rb").read()
    return out


@needs_root
def test_root_sync_drops_to_the_user_and_copies_no_foreign_file(world):
    base, alice = world["base"], world["alice"]
    rep = cs.sync_for_job(settings(base, marker="DONE"), env(alice))
    dest = world["shared"] / ALICE / "train"
    names = sorted(n for n in os.listdir(dest) if not n.startswith("."))
    # step 1 copied; step 2 (manifest naming symlinks) refused whole; step 3 copied without its symlinks;
    # step 4 (a symlink to bob's checkpoint) is not a checkpoint at all
    assert names == ["step-0000000001", "step-0000000003"], rep
    assert any("step-0000000002" in e and "symlink" in e for e in rep["errors"]), rep
    assert sorted(os.listdir(dest / "step-0000000003")) == ["DONE", "model.bin", mf.MANIFEST]
    data = all_bytes(world["shared"])
    assert b"root secret" not in data and b"bob's weights" not in data and b"bob ckpt" not in data
    for dirpath, dirnames, filenames in os.walk(dest):
        for n in [dirpath, *[os.path.join(dirpath, x) for x in dirnames + filenames]]:
            st = os.lstat(n)
            assert (st.st_uid, st.st_gid) == (alice.pw_uid, alice.pw_gid), n  # written as alice, not root
    assert mf.verify(str(dest / "step-0000000001"), mf.read(str(dest / "step-0000000001"))) == []
    rec = list(healthlog.read(str(base / "health.jsonl")))[-1]
    assert rec["context"] == "sync" and rec["status"] == "fail" and rec["job_id"] == 77


@needs_root
def test_a_manifest_pointing_at_root_only_data_through_the_source_dir_is_unreadable(world):
    """Even a plain (non-symlink) path is read as alice: a source pattern that resolves into bob's 0700
    directory copies nothing, while root could have read it."""
    base, alice = world["base"], world["alice"]
    s = settings(base)
    s.sync.source = f"{base}/bob"            # bob's private dir holding a complete checkpoint
    rep = cs.sync_for_job(s, env(alice))
    assert rep["status"] == "failed" and "Permission denied" in " ".join(rep["errors"]), rep
    assert not os.path.exists(world["shared"] / ALICE / "train" / "step-0000000009")


@needs_root
def test_a_root_job_is_refused(world):
    e = dict(env(world["alice"]), SLURM_JOB_UID="0", SLURM_JOB_USER="root")
    s = settings(world["base"])
    os.makedirs(cs.expand(s.sync.source, e, "source"), exist_ok=True)   # root's job did leave checkpoints
    rep = cs.sync_for_job(s, e)
    assert rep["status"] == "failed" and "root" in rep["errors"][0]


@needs_root
def test_a_root_job_without_checkpoints_leaves_no_record(world):
    s = settings(world["base"])
    s.sync.source = f"{world['base']}/no-such-dir/$SLURM_JOB_ID"
    rep = cs.sync_for_job(s, dict(env(world["alice"]), SLURM_JOB_UID="0", SLURM_JOB_USER="root"))
    assert rep["status"] == "nothing"


@needs_root
def test_mismatched_user_and_uid_is_refused(world):
    rep = cs.sync_for_job(settings(world["base"]), dict(env(world["alice"]), SLURM_JOB_USER=BOB))
    assert rep["status"] == "failed" and "is not uid" in rep["errors"][0]


@needs_root
def test_cli_sync_as_user(world):
    exe = os.path.join(os.path.dirname(os.sys.executable), "slurmkit")
    dest = world["shared"] / "by-hand"
    r = subprocess.run([exe, "sync", str(world["src"]), str(dest), "--user", ALICE, "--json"],
                       capture_output=True, text=True, env=dict(os.environ, SLURMKIT_CONFIG="/dev/null"), timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr  # step 2 refused
    assert sorted(n for n in os.listdir(dest) if not n.startswith(".")) == ["step-0000000001"]
    assert os.stat(dest).st_uid == world["alice"].pw_uid


@needs_root
def test_budget_spent_in_the_epilog_is_finished_by_a_background_sync(world):
    import time
    base, alice = world["base"], world["alice"]
    cfg = base / "site.yaml"
    cfg.write_text(site_yaml(base, keep=5, background=True))   # a file: the background sync reloads it
    s = config.load(str(cfg))
    shutil.rmtree(world["src"] / "step-0000000002")  # only good checkpoints: the background run ends "ok"
    rep = cs.sync_for_job(s, env(alice), budget=0.001)  # the epilog's budget is already spent
    assert rep["status"] == "partial" and rep["deferred"] and rep["finish"] == "background", rep
    first = list(healthlog.read(str(base / "health.jsonl")))[-1]
    assert first["action"] == "deferred-background" and "background" in first["reason"]
    dest = world["shared"] / ALICE / "train"
    deadline = time.monotonic() + 60
    recs = []
    while time.monotonic() < deadline:
        recs = [r for r in healthlog.read(str(base / "health.jsonl")) if r.get("phase") == "sync-background"]
        if recs:
            break
        time.sleep(0.2)
    assert recs, open(base / "state" / "sync-background.log").read()
    assert recs[-1]["status"] == "ok" and recs[-1]["action"] == "copied", recs[-1]
    assert sorted(n for n in os.listdir(dest) if not n.startswith(".")) == ["step-0000000001"]
    assert mf.verify(str(dest / "step-0000000001"), mf.read(str(dest / "step-0000000001"))) == []
