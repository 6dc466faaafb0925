import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import checkpoint
from slurmkit.checkpoint import manifest


def write_state(value):
    def fn(tmp):
        Path(tmp, "state.json").write_text(json.dumps(value))
        Path(tmp, "sub").mkdir()
        Path(tmp, "sub", "blob.bin").write_bytes(os.urandom(1000))
    return fn


def test_save_then_latest_returns_the_newest_complete(tmp_path):
    assert checkpoint.latest(str(tmp_path / "none")) is None
    for step in (5, 20, 100):
        ck = checkpoint.save(str(tmp_path), step, write_state({"step": step}))
        assert ck.path == str(tmp_path / f"step-{step:010d}")
    names = sorted(os.listdir(tmp_path))
    assert names == ["step-0000000005", "step-0000000020", "step-0000000100"]   # lexical order == step order
    latest = checkpoint.latest(str(tmp_path), verify=True)
    assert latest.step == 100 and json.loads(Path(latest.path, "state.json").read_text()) == {"step": 100}
    m = manifest.read(latest.path)
    assert {f["path"] for f in m["files"]} == {"state.json", "sub/blob.bin"} and m["step"] == 100


def test_latest_skips_tmp_dirs_and_dirs_without_a_valid_manifest(tmp_path):
    checkpoint.save(str(tmp_path), 10, write_state(1))
    # a killed save (temp dir with everything but the manifest), a step dir without manifest, a bad manifest,
    # a manifest whose file is missing, and a manifest for another step: none of them counts as complete
    (tmp_path / ".tmp-step-0000000050-h-1-abcdef12").mkdir()
    (tmp_path / ".tmp-step-0000000050-h-1-abcdef12" / "state.json").write_text("{}")
    (tmp_path / "step-0000000060").mkdir()
    (tmp_path / "step-0000000060" / "state.json").write_text("{}")
    (tmp_path / "step-0000000070").mkdir()
    (tmp_path / "step-0000000070" / manifest.MANIFEST).write_text("{not json")
    checkpoint.save(str(tmp_path), 80, write_state(2))
    os.unlink(tmp_path / "step-0000000080" / "sub" / "blob.bin")
    checkpoint.save(str(tmp_path), 90, write_state(3))
    os.rename(tmp_path / "step-0000000090", tmp_path / "step-0000000095")
    assert checkpoint.latest(str(tmp_path)).step == 10
    assert [c.step for c in checkpoint.complete(str(tmp_path))] == [10]


def test_verify_falls_back_when_a_hash_does_not_match(tmp_path):
    checkpoint.save(str(tmp_path), 1, write_state("a"))
    checkpoint.save(str(tmp_path), 2, write_state("b"))
    p = tmp_path / "step-0000000002" / "state.json"
    p.write_text('"c"')          # same size, different bytes: only the hash sees it
    assert checkpoint.latest(str(tmp_path)).step == 2
    assert checkpoint.latest(str(tmp_path), verify=True).step == 1


def test_failed_write_leaves_nothing(tmp_path):
    def boom(tmp):
        Path(tmp, "half.bin").write_bytes(b"x" * 10)
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError):
        checkpoint.save(str(tmp_path), 3, boom)
    assert os.listdir(tmp_path) == []


def test_keep_prunes_old_checkpoints_and_same_step_is_replaced(tmp_path):
    for step in range(1, 6):
        checkpoint.save(str(tmp_path), step, write_state(step), keep=2)
    assert sorted(os.listdir(tmp_path)) == ["step-0000000004", "step-0000000005"]
    checkpoint.save(str(tmp_path), 5, write_state("again"), keep=2)
    assert sorted(os.listdir(tmp_path)) == ["step-0000000004", "step-0000000005"]
    assert json.loads(Path(checkpoint.latest(str(tmp_path)).path, "state.json").read_text()) == "again"
    with pytest.raises(ValueError):
        checkpoint.prune(str(tmp_path), 0)


def test_stale_tmp_of_dead_processes_is_removed_others_kept(tmp_path):
    host = checkpoint._tmp_name("step", 1).split("-")[3]
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".tmp-step-0000000001-{host}-{dead.pid}-0123abcd"
    alive = tmp_path / f".tmp-step-0000000001-{host}-{os.getppid()}-0123abcd"
    other = tmp_path / ".tmp-step-0000000001-otherhost-12345-0123abcd"
    for d in (stale, alive, other):
        d.mkdir()
    checkpoint.save(str(tmp_path), 2, write_state(0))
    assert not stale.exists() and alive.exists() and other.exists()


def test_names():
    assert checkpoint.name_for(1200) == "step-0000001200"
    assert checkpoint.step_of("step-0000001200") == 1200
    assert checkpoint.step_of(".tmp-step-0000001200-h-1-abcdef12") is None
    assert checkpoint.step_of("step-12") is None
    with pytest.raises(ValueError):
        checkpoint.name_for(-1)


KILLED_WRITER = r"""
import os, sys
from slurmkit import checkpoint
d = sys.argv[1]
step = (checkpoint.latest(d).step if checkpoint.latest(d) else 0)
def write(tmp):
    for i in range(4):
        with open(os.path.join(tmp, f"blob-{i}.bin"), "wb") as f:
            f.write(os.urandom(256 * 1024))
step += 1
checkpoint.save(d, step, write, keep=3)   # one complete first (the modules a save needs load lazily, in it)
print("ready", flush=True)
while True:
    step += 1
    checkpoint.save(d, step, write, keep=3)
"""


def test_sigkill_during_saves_never_leaves_a_complete_looking_partial(tmp_path):
    """SIGKILL a process that saves checkpoints back to back, at random moments, 25 times; after each kill every
    directory with a checkpoint's name verifies, and the kills did land inside saves (temp dirs left)."""
    rng = random.Random(1234)
    d = str(tmp_path / "ck")
    mid_save = 0
    for _ in range(25):
        p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, d], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.15))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        names = os.listdir(d) if os.path.isdir(d) else []
        mid_save += any(n.startswith(checkpoint.TMP_PREFIX) for n in names)
        for n in names:
            if n.startswith(checkpoint.TMP_PREFIX):
                continue
            m = manifest.read(os.path.join(d, n))
            assert m is not None and manifest.verify(os.path.join(d, n), m) == [], n
    assert mid_save >= 5, mid_save
    assert checkpoint.latest(d, verify=True) is not None


STOPPER = r"""
import os, sys, time
from slurmkit import checkpoint
print("ready", flush=True)
for _ in range(200):
    if checkpoint.stop_requested():
        print("stop", flush=True); sys.exit(0)
    time.sleep(0.02)
print("timeout", flush=True)
"""


@pytest.mark.parametrize("how", ["signal", "file"])
def test_stop_requested_by_signal_or_flag_file(tmp_path, how):
    flag = tmp_path / "stop"
    env = dict(os.environ, SLURMKIT_STOP_FILE=str(flag), SLURMKIT_STOP_SIGNAL="SIGTERM" if how == "signal" else "")
    p = subprocess.Popen([sys.executable, "-c", STOPPER], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    if how == "signal":
        p.send_signal(signal.SIGTERM)
    else:
        flag.write_text("timeout\n")
    assert p.stdout.readline().strip() == "stop"
    assert p.wait(timeout=10) == 0


def test_without_the_wrapper_sigterm_keeps_its_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMKIT_STOP")}
    p = subprocess.Popen([sys.executable, "-c", STOPPER], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == -signal.SIGTERM


def test_import_is_light():
    code = ("import sys; import slurmkit.checkpoint; "
            "bad = [m for m in ('click', 'yaml', 'jinja2', 'paramiko', 'ClusterShell') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_repeated_stop_signal_after_the_flag_does_not_kill(tmp_path):
    """The flag file is often seen before the wrapper's signal lands, and the signal can come twice: once a stop
    is requested the signal is ignored, so the process still exits with its own code."""
    flag = tmp_path / "stop"
    code = STOPPER.replace('print("stop", flush=True); sys.exit(0)',
                           'import signal; print("stop", signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN, '
                           'flush=True); time.sleep(0.5); sys.exit(0)')
    env = dict(os.environ, SLURMKIT_STOP_FILE=str(flag), SLURMKIT_STOP_SIGNAL="SIGUSR2")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    flag.write_text("timeout\n")
    assert p.stdout.readline().strip() == "stop True"       # ignored from now on, shutdown included
    p.send_signal(signal.SIGUSR2)
    p.send_signal(signal.SIGUSR2)
    assert p.wait(timeout=10) == 0
