"""Root syncs a user's checkpoints by dropping to that user: symlinks to root-only files or to another user's
files copy nothing. Needs root (the epilog's situation) and creates two test users with useradd when missing."""
import os
import pwd
import shutil
import subprocess

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint import sync as cs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the sync drops root to the job's user")

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


def site_yaml(base, background=False) -> str:
    return f"""
paths:
  health_log: {base}/health.jsonl
  state_dir: {base}/state
sync:
  enabled: true
  source: {base}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {base}/shared/$SLURM_JOB_USER/$SLURM_JOB_NAME
  keep: 5
  background: {str(background).lower()}
"""


def settings(base, marker=None):
    s = config.loads(site_yaml(base))
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


def test_a_manifest_pointing_at_root_only_data_through_the_source_dir_is_unreadable(world):
    """Even a plain (non-symlink) path is read as alice: a source pattern that resolves into bob's 0700
    directory copies nothing, while root could have read it."""
    base, alice = world["base"], world["alice"]
    s = settings(base)
    s.sync.source = f"{base}/bob"            # bob's private dir holding a complete checkpoint
    rep = cs.sync_for_job(s, env(alice))
    assert rep["status"] == "failed" and "Permission denied" in " ".join(rep["errors"]), rep
    assert not os.path.exists(world["shared"] / ALICE / "train" / "step-0000000009")


def test_a_root_job_is_refused(world):
    e = dict(env(world["alice"]), SLURM_JOB_UID="0", SLURM_JOB_USER="root")
    s = settings(world["base"])
    os.makedirs(cs.expand(s.sync.source, e, "source"), exist_ok=True)   # root's job did leave checkpoints
    rep = cs.sync_for_job(s, e)
    assert rep["status"] == "failed" and "root" in rep["errors"][0]


def test_a_root_job_without_checkpoints_leaves_no_record(world):
    s = settings(world["base"])
    s.sync.source = f"{world['base']}/no-such-dir/$SLURM_JOB_ID"
    rep = cs.sync_for_job(s, dict(env(world["alice"]), SLURM_JOB_UID="0", SLURM_JOB_USER="root"))
    assert rep["status"] == "nothing"


def test_mismatched_user_and_uid_is_refused(world):
    rep = cs.sync_for_job(settings(world["base"]), dict(env(world["alice"]), SLURM_JOB_USER=BOB))
    assert rep["status"] == "failed" and "is not uid" in rep["errors"][0]


def test_cli_sync_as_user(world):
    exe = os.path.join(os.path.dirname(os.sys.executable), "slurmkit")
    dest = world["shared"] / "by-hand"
    r = subprocess.run([exe, "sync", str(world["src"]), str(dest), "--user", ALICE, "--json"],
                       capture_output=True, text=True, env=dict(os.environ, SLURMKIT_CONFIG="/dev/null"), timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr  # step 2 refused
    assert sorted(n for n in os.listdir(dest) if not n.startswith(".")) == ["step-0000000001"]
    assert os.stat(dest).st_uid == world["alice"].pw_uid


def test_budget_spent_in_the_epilog_is_finished_by_a_background_sync(world):
    import time
    base, alice = world["base"], world["alice"]
    cfg = base / "site.yaml"
    cfg.write_text(site_yaml(base, background=True))   # a file: the background sync reloads it
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
