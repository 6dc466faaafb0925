"""Issue 17's sync items, as a hostile or careless user would meet them: S1 (nothing under DEST followed, a
planted temporary removed, a root sync refusing another user's DEST), S3 (the manual hint pastes safely), D1
(overlapping SOURCE and DEST refused), H5 (an unsupported manifest algorithm is an error, never a hang), H6 (a
huge manifest is refused by a documented limit)."""
import json
import os
import shlex
import subprocess
import sys
import threading

import pytest

from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint import sync as cs

ROOT = os.geteuid() == 0
SK = os.path.join(os.path.dirname(sys.executable), "slurmkit")


def mk(root, step, files):
    d = os.path.join(root, f"step-{step:010d}")
    for rel, data in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    mf.write(d, mf.build(d, step))
    return d


def sk(*args, **kw):
    env = dict(os.environ, SLURMKIT_CONFIG="/dev/null")
    return subprocess.run([SK, *args], capture_output=True, text=True, timeout=120, env=env, **kw)


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
