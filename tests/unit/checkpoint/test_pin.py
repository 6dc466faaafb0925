"""Issue 29, the 2-node drill's intermittent failure: the trainer's own retention (`checkpoint.save(..., keep=3)`)
removes the step the replicator chose before the copy child reads it. The copy child answered "nothing to copy"
(status ok, copied []), which the wrapper logged as `replicate-failed ... error="no report"`; on a follower node,
which may copy only a step node 0 already published (always an older one), that happened for every step under
load, so DEST never held a complete 2-part step.

The fix: the replicator pins what it will copy (hard links in a hidden `.tmp-repl-*` directory of LOCAL, which
readers skip and the trainer's retention never touches) and the copy reads the pin; a follower pins each step it
sees until node 0 publishes one of them. These tests make the race happen every time (synthetic: the trainer's
save and prune run between the wrapper's choice and the copy child's scan)."""
import os
import stat
import sys
from pathlib import Path

from slurmkit import checkpoint
from slurmkit.checkpoint import manifest
from slurmkit.checkpoint.parts import durable_steps, record_parts
from slurmkit.checkpoint.replicate import Replicator


def _save(d: Path, step: int, keep=None, size=4096):
    return checkpoint.save(str(d), step, lambda tmp: Path(tmp, "w.bin").write_bytes(bytes([step % 256]) * size),
                           keep=keep)


def _racing_python(tmp_path: Path, local: Path, step: int) -> str:
    """A python that first does what the trainer does between the wrapper's scan and the copy child's (saves
    `step` with keep=1: every older step is pruned), then runs the copy child."""
    p = tmp_path / "racing-python"
    p.write_text("#!/bin/sh\n"
                 f"'{sys.executable}' -c \"from pathlib import Path; from slurmkit import checkpoint; "
                 f"checkpoint.save('{local}', {step}, lambda t: Path(t, 'w.bin').write_bytes(b'n'), keep=1)\"\n"
                 f"exec '{sys.executable}' \"$@\"\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def _events(events, name):
    return [kv for e, kv in events if e == name]


def test_synthetic_the_trainer_prunes_the_chosen_step_before_the_copy_reads_it_and_it_is_still_copied(tmp_path):
    local, dest = tmp_path / "local", tmp_path / "durable"
    _save(local, 1)
    events = []
    r = Replicator(str(local), str(dest), series="7", keep=3, interval=60, bwlimit_mib=0, nice=0, timeout=60,
                   log=lambda ev, **kv: events.append((ev, kv)), python=_racing_python(tmp_path, local, 2))
    assert r.pass_once() == "step-0000000001", events
    assert [c.step for c in checkpoint.complete(str(local))] == [2]      # the trainer did prune step 1
    got = checkpoint.latest(str(dest), verify=True)
    assert got is not None and got.step == 1
    assert (Path(got.path) / "w.bin").read_bytes() == bytes([1]) * 4096
    assert not _events(events, "replicate-failed")
    assert not [n for n in os.listdir(local) if n.startswith(".tmp-repl-")]   # the pin is gone after the copy


def test_synthetic_a_follower_copies_the_step_node0_published_after_its_own_trainer_pruned_it(tmp_path):
    dest, n0, n1 = tmp_path / "durable", tmp_path / "n0", tmp_path / "n1"
    mk = lambda local, rank: Replicator(str(local), str(dest), series="42", keep=3, interval=60, bwlimit_mib=0,  # noqa: E731
                                       nice=0, timeout=60, log=lambda *a, **k: None, part=rank, parts=2)
    r0, r1 = mk(n0, 0), mk(n1, 1)
    record_parts(str(dest), 2, "42")
    for s in (1, 2, 3):
        _save(n0, s, keep=3)
        _save(n1, s, keep=3)
    assert r1.pass_once() is None                     # node 0 has published nothing yet: node 1 waits (and pins)
    for s in (4, 5, 6):                               # node 1's trainer runs on: steps 1-3 leave its LOCAL
        _save(n1, s, keep=3)
    assert [c.step for c in checkpoint.complete(str(n1))] == [4, 5, 6]
    assert r0.pass_once() == "step-0000000003"        # node 0 (slower) publishes step 3
    assert r1.pass_once() == "step-0000000003"        # node 1 still has it: its pin
    assert durable_steps(str(dest)) == (["step-0000000003"], 2)
    part = dest / "node-1" / "step-0000000003"
    assert manifest.verify(str(part), manifest.read(str(part))) == []
    assert (part / "w.bin").read_bytes() == bytes([3]) * 4096
    # pins older than what node 1 published are let go; the newer ones wait for node 0
    pins = sorted(n.split("-")[2] for n in os.listdir(n1) if n.startswith(".tmp-repl-"))
    assert pins and all(int(p) > 3 for p in pins), pins
    for s in (4, 5, 6):
        _save(n0, s, keep=3)
    assert r0.pass_once() == "step-0000000006"
    assert r1.pass_once() == "step-0000000006"
    assert durable_steps(str(dest))[0][-1] == "step-0000000006"
    r1.stop(final_timeout=10)
    r0.stop(final_timeout=10)
    assert not [n for n in os.listdir(n1) if n.startswith(".tmp-repl-")]   # stop lets every pin go


def test_synthetic_a_copy_child_that_finds_no_such_checkpoint_says_so(tmp_path):
    """Without a pin (hard links refused), the copy reads LOCAL itself: a step gone by then is an error that
    says what happened, never an empty "no report"."""
    import json
    import subprocess

    local, dest = tmp_path / "local", tmp_path / "durable"
    _save(local, 2)
    out = subprocess.run([sys.executable, "-m", "slurmkit.checkpoint.replicate", "copy", str(local), str(dest),
                          "step-0000000001"], capture_output=True, text=True, timeout=60)
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 1 and rep["status"] == "failed", out
    assert "step-0000000001: no complete checkpoint of that name" in rep["errors"][0], rep
    assert not dest.exists()


def test_keep_pins_holds_what_node0_may_still_publish():
    from slurmkit.checkpoint.pin import keep_pins

    pins = ["s2", "s3", "s5", "s6", "s7"]
    assert keep_pins(pins, "", [], 8) == pins                      # node 0 published nothing yet: all of them
    assert keep_pins(pins, "", [], 2) == ["s6", "s7"]              # the newest `most`
    assert keep_pins(pins, "", ["s3", "s5"], 8) == ["s3", "s5", "s6", "s7"]   # s2: node 0 is past it
    assert keep_pins(pins, "s5", ["s3", "s5"], 8) == ["s6", "s7"]  # published s5: older ones go
    assert keep_pins(pins, "", ["s1", "s4"], 8) == ["s5", "s6", "s7"]


def test_a_pin_left_by_a_wrapper_that_died_goes_with_the_trainers_next_save(tmp_path):
    from slurmkit.checkpoint.pin import pin

    local = tmp_path / "local"
    ck = _save(local, 1)
    root = pin(str(local), "step-0000000001", ck.manifest)
    assert Path(root, "step-0000000001", "w.bin").read_bytes() == bytes([1]) * 4096
    assert os.stat(Path(root, "step-0000000001", "w.bin")).st_ino == os.stat(Path(ck.path, "w.bin")).st_ino
    assert checkpoint.latest(str(local)).step == 1                 # a pin is never read as a checkpoint
    dead = Path(root).name.rsplit("-", 2)
    stale = local / f"{dead[0]}-999999999-{dead[2]}"               # synthetic: the same pin of a pid that is gone
    os.rename(root, stale)
    _save(local, 2)                                                # a live pin would stay; this one is debris
    assert not stale.exists()


def test_a_symlink_in_a_checkpoint_is_never_pinned_through(tmp_path):
    from slurmkit.checkpoint.pin import Gone, pin

    local = tmp_path / "local"
    ck = _save(local, 1)
    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 4096)
    os.unlink(Path(ck.path, "w.bin"))
    os.symlink(secret, Path(ck.path, "w.bin"))                     # planted after the save, same size
    try:
        pin(str(local), "step-0000000001", ck.manifest)
        raise AssertionError("pinned through a symlink")
    except Gone as e:
        assert "w.bin" in str(e)
    assert not [n for n in os.listdir(local) if n.startswith(".tmp-repl-")]
