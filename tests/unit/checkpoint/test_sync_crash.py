"""Crash consistency: SIGKILL the sync at random points; the destination always holds the old complete set or
the new complete set (every visible checkpoint verifying against its manifest), and the next run finishes.

One subprocess per kill. The child signals "ready" once imported, then syncs; the parent kills it after a random
delay drawn over the measured length of an undisturbed sync, so the kills land all over the copy, the fsyncs,
the manifest write and the renames.
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint import sync as cs

KILLS = int(os.environ.get("SLURMKIT_CRASH_KILLS", "100"))

CHILD = r"""
import sys
from slurmkit.checkpoint import sync as cs
src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.stdout.write("ready\n"); sys.stdout.flush()
rep = cs.sync_dir(src, dst, keep=keep, workers=2)
sys.stdout.write("done\n"); sys.stdout.flush()
sys.exit(0 if rep["status"] == "ok" else 1)
"""


def make_ckpt(root, step, nfiles=12, size=40_000, salt=0):
    d = os.path.join(root, f"step-{step:010d}")
    shutil.rmtree(d, ignore_errors=True)
    rnd = random.Random(step * 1000 + salt)
    for i in range(nfiles):
        p = os.path.join(d, "shards" if i % 2 else "", f"f{i:02d}.bin")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(rnd.randbytes(size + i))
    mf.write(d, mf.build(d, step))


def state(dest, content=False):
    """The visible checkpoints, each verified; a visible checkpoint that does not verify fails the test.
    With content=True each name comes with its content (the first file's hash), to tell versions apart."""
    names = sorted(n for n in os.listdir(dest) if not n.startswith("."))
    out = []
    for n in names:
        m = mf.read(os.path.join(dest, n))
        assert m is not None, f"{n} visible without a manifest"
        assert mf.verify(os.path.join(dest, n), m) == [], f"{n} visible but does not verify"
        out.append((n, m["files"][0]["hash"][:8]) if content else n)
    return tuple(out)


def run_child(src, dst, keep, delay):
    p = subprocess.Popen([sys.executable, "-c", CHILD, src, dst, str(keep)], stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    t0 = time.monotonic()
    if delay is None:
        assert p.stdout.readline() == b"done\n"
        took = time.monotonic() - t0
        p.wait(timeout=60)
        return took, p.returncode
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    return time.monotonic() - t0, p.returncode


def kill_loop(tmp_path, keep, old, new, extra_ok=(), kills=KILLS, change=lambda src: make_ckpt(src, 3),
              content=False):
    src = str(tmp_path / "src")
    base = str(tmp_path / "base")
    dst = str(tmp_path / "dst")
    for s in (1, 2):
        make_ckpt(src, s)
    cs.sync_dir(src, base, keep=keep)
    assert state(base) == old                      # the names before the change
    old = state(base, content)                     # with content: the versions too
    change(src)
    # how long an undisturbed sync takes, to spread the kills over it
    runs, names_new, new = [], new, None
    for _ in range(3):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(base, dst)
        took, rc = run_child(src, dst, keep, None)
        assert rc == 0 and state(dst) == names_new
        got = state(dst, content)
        assert new is None or got == new, (got, new)   # every undisturbed run ends in the same state
        new = got
        runs.append(took)
    assert new != old
    took = sorted(runs)[1]
    seen = {}
    rnd = random.Random(1234 + keep)
    for _ in range(kills):
        shutil.rmtree(dst)
        shutil.copytree(base, dst)
        run_child(src, dst, keep, rnd.uniform(0, took * 1.1))
        st = state(dst, content)
        assert st in (old, new, *extra_ok), f"after a kill the destination holds {st}"
        temps = [n for n in os.listdir(dst) if n.startswith((cs.TMP_PREFIX, cs.OLD_PREFIX))]
        assert len(temps) <= 1, temps  # at most one temporary directory
        seen[(st, bool(temps))] = seen.get((st, bool(temps)), 0) + 1
        rep = cs.sync_dir(src, dst, keep=keep)  # the next run cleans up or resumes, and finishes
        assert rep["status"] == "ok" and state(dst, content) == new
        assert [n for n in os.listdir(dst) if n.startswith((cs.TMP_PREFIX, cs.OLD_PREFIX))] == []
    return seen


def test_sigkill_anywhere_leaves_old_or_new_set(tmp_path):
    old = ("step-0000000001", "step-0000000002")
    new = old + ("step-0000000003",)
    seen = kill_loop(tmp_path, 3, old, new)
    print("states after kills:", seen)
    # the kills must have landed on both sides of the publish and inside the copy, or the test proves little
    assert any(st == old and tmp for (st, tmp) in seen), seen
    assert any(st == new for (st, _) in seen), seen


def test_sigkill_with_retention(tmp_path):
    """keep=2: publishing step 3 then retiring step 1 are two atomic steps; killed between them, the old set
    plus the new checkpoint is visible (all complete), and the next run retires step 1."""
    old = ("step-0000000001", "step-0000000002")
    new = ("step-0000000002", "step-0000000003")
    seen = kill_loop(tmp_path, 2, old, new, extra_ok=(old + ("step-0000000003",),), kills=max(1, KILLS // 2))
    print("states after kills:", seen)
    assert any(st == old and tmp for (st, tmp) in seen), seen
    assert any(st == new for (st, _) in seen), seen


def test_sigkill_while_replacing_a_changed_checkpoint(tmp_path):
    """Step 2 rewritten at the source (new content, same name): the copy at the destination is swapped in one
    atomic exchange, so step 2 is never missing and never a mix."""
    names = ("step-0000000001", "step-0000000002")     # the same names before and after: step 2 changes content
    seen = kill_loop(tmp_path, 3, names, names, kills=max(1, KILLS // 2), content=True,
                     change=lambda src: make_ckpt(src, 2, salt=1))
    print("states after kills:", seen)
    assert len({st for (st, _) in seen}) == 2, seen  # both versions seen, nothing else
