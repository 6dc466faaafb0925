"""Issue 29: replication during the job (which checkpoint to copy next, intermediates skipped, the copy child, the
bandwidth limit) and restore on resume. The checkpoints are real ones written by checkpoint.save into tmp dirs."""
import os
from pathlib import Path

from slurmkit import checkpoint
from slurmkit.checkpoint import manifest
from slurmkit.checkpoint.pacing import Throttle, YieldToSaves, saves_in_progress
from slurmkit.checkpoint.replicate import Replicator, next_to_copy, restore, restore_choice


def _m(step, h="a"):
    return {"algo": "sha256", "step": step, "files": [{"path": "w", "size": 1, "hash": h}]}


def test_next_to_copy_is_the_newest_and_skips_intermediates():
    local = {"step-0000000001": _m(1), "step-0000000002": _m(2), "step-0000000003": _m(3)}
    assert next_to_copy({}, {}) is None
    assert next_to_copy(local, {}) == "step-0000000003"
    # behind by two: the intermediate step 2 is never chosen
    assert next_to_copy(local, {"step-0000000001": _m(1)}) == "step-0000000003"
    assert next_to_copy(local, {"step-0000000003": _m(3)}) is None
    # DEST already holds a newer one (restored from another run): nothing older is copied
    assert next_to_copy(local, {"step-0000000009": _m(9)}) is None
    # the same name saved again with other bytes: copied again
    assert next_to_copy(local, {"step-0000000003": _m(3, "b")}) == "step-0000000003"
    # a marker-only checkpoint already durable is not copied again
    assert next_to_copy({"step-0000000003": "marker"}, {"step-0000000003": _m(3)}) is None


def test_restore_choice_only_when_dest_is_newer():
    assert restore_choice([], []) is None
    assert restore_choice([], ["step-0000000004"]) == "step-0000000004"
    assert restore_choice(["step-0000000004"], ["step-0000000003", "step-0000000004"]) is None
    assert restore_choice(["step-0000000002"], ["step-0000000003", "step-0000000001"]) == "step-0000000003"
    assert restore_choice(["step-0000000005"], ["step-0000000003"]) is None


def test_throttle_keeps_the_average_rate():
    t = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        t[0] += s

    th = Throttle(100.0, clock=lambda: t[0], sleep=sleep)
    for _ in range(10):
        th(50)
    assert abs(t[0] - 5.0) < 1e-9            # 500 bytes at 100 B/s: 5 s
    assert Throttle(0)(1 << 30) is None       # no limit: no sleep


def test_a_copy_waits_while_a_save_is_written_and_a_killed_saves_leftover_only_briefly():
    t = [0.0]
    names = {"now": [".tmp-step-0000000005-n1-42-0a1b2c3d"]}

    def sleep(s):
        t[0] += s
        if t[0] >= 3.0:                               # the save is published at t=3: its directory is gone
            names["now"] = []

    y = YieldToSaves("LOCAL", clock=lambda: t[0], sleep=sleep, look=lambda _: list(names["now"]), max_pause=10)
    y(1 << 20)
    assert 3.0 <= t[0] < 3.1 and 3.0 <= y.paused < 3.1
    y(1 << 20)                                        # no save in progress: the copy goes on at once
    assert t[0] < 3.2
    # a save killed mid-write leaves its directory: waited on max_pause once, then ignored
    names["now"] = [".tmp-step-0000000010-n1-43-deadbeef"]
    t0 = t[0]
    sleep_only = lambda s: t.__setitem__(0, t[0] + s)  # noqa: E731
    y = YieldToSaves("LOCAL", clock=lambda: t[0], sleep=sleep_only, look=lambda _: list(names["now"]), max_pause=10)
    y(1)
    assert 10.0 <= t[0] - t0 < 10.1
    t1 = t[0]
    y.last_look = float("-inf")
    y(1)
    assert t[0] == t1                                 # the leftover no longer holds the copy
    # pins, retention's hidden deletions and a copy's own debris are not saves
    assert YieldToSaves("L", look=lambda _: [], clock=lambda: 0.0)._blocking() is False


def test_the_real_save_directory_is_what_the_copy_waits_for(tmp_path):
    # checkpoint.save writes into LOCAL/.tmp-step-*; while its function runs, the copy sees a save in progress
    seen = []

    def write(tmp):
        seen.append(saves_in_progress(str(tmp_path)))
        Path(tmp, "w.bin").write_bytes(b"x" * 10)

    checkpoint.save(str(tmp_path), 7, write)
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith(".tmp-step-"), seen
    assert saves_in_progress(str(tmp_path)) == []     # published: nothing in progress
    (tmp_path / ".tmp-repl-0000000007-n1-1-0a0b0c0d").mkdir()   # a pin: not a save
    assert saves_in_progress(str(tmp_path)) == []
    assert saves_in_progress(str(tmp_path / "missing")) == []


def _save(d: Path, step: int, size=4096):
    return checkpoint.save(str(d), step, lambda tmp: Path(tmp, "w.bin").write_bytes(bytes([step % 256]) * size))


def test_replicator_copies_the_newest_complete_checkpoint_verified(tmp_path):
    local, dest = tmp_path / "local", tmp_path / "durable"
    events = []
    r = Replicator(str(local), str(dest), series="77", keep=2, interval=60, bwlimit_mib=0, nice=0, timeout=60,
                   log=lambda ev, **kv: events.append((ev, kv)))
    assert r.pass_once() is None and not dest.exists()
    _save(local, 1)
    os.makedirs(local / ".tmp-step-0000000002-h-1-x")          # a save in progress: never copied
    assert r.pass_once() == "step-0000000001"
    got = checkpoint.latest(str(dest), verify=True)
    assert got is not None and got.step == 1 and got.manifest["sync"]["series"] == "77"
    assert r.pass_once() is None                                  # nothing new
    for s in (2, 3, 4):
        _save(local, s)
    assert r.pass_once() == "step-0000000004"                     # the replicator was behind: 2, 3 skipped
    assert sorted(n for n in os.listdir(dest) if n.startswith("step-")) == ["step-0000000001", "step-0000000004"]
    ev = [kv for e, kv in events if e == "replicated"]
    assert ev[-1]["checkpoint"] == "step-0000000004" and ev[-1]["skipped"] == "step-0000000002,step-0000000003"
    _save(local, 5)
    assert r.pass_once() == "step-0000000005"
    # retention of the job's own series at DEST: keep=2
    assert sorted(n for n in os.listdir(dest) if n.startswith("step-")) == ["step-0000000004", "step-0000000005"]
    for n in ("step-0000000004", "step-0000000005"):
        assert manifest.verify(str(dest / n), manifest.read(str(dest / n))) == []


def test_replicator_reports_a_destination_it_cannot_write(tmp_path):
    local = tmp_path / "local"
    _save(local, 1)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    events = []
    r = Replicator(str(local), str(blocker / "sub"), series=None, keep=2, interval=60, bwlimit_mib=0, nice=0,
                   timeout=60, log=lambda ev, **kv: events.append((ev, kv)))
    assert r.pass_once() is None
    assert events and events[-1][0] == "replicate-failed" and events[-1][1]["checkpoint"] == "step-0000000001"


def test_restore_brings_the_newer_durable_checkpoint_to_node_local_disk(tmp_path):
    local, dest = tmp_path / "local", tmp_path / "durable"
    r = Replicator(str(local), str(dest), series="5", keep=3, interval=60, bwlimit_mib=0, nice=0, timeout=60,
                   log=lambda *a, **k: None)
    _save(local, 7)
    assert r.pass_once() == "step-0000000007"
    # the node is gone: a fresh node-local directory on another node
    fresh = tmp_path / "other-node"
    out = restore(str(fresh), str(dest), deadline=None)
    assert out["restored"] == "step-0000000007" and out["step"] == 7 and not out["errors"]
    got = checkpoint.latest(str(fresh), verify=True)
    assert got is not None and got.step == 7
    assert (Path(got.path) / "w.bin").read_bytes() == bytes([7]) * 4096
    # node-local as new as DEST: nothing to do
    assert restore(str(fresh), str(dest), deadline=None)["restored"] is None
    # node-local newer than DEST: kept
    _save(fresh, 8)
    assert restore(str(fresh), str(dest), deadline=None)["restored"] is None
    assert checkpoint.latest(str(fresh)).step == 8


def test_node_fault_decision_needs_a_failure_and_a_fault():
    """Issue 29: the requeue-on-node-fault decision is a pure function of the child's exit and the node's checks."""
    from slurmkit.run.nodefault import decide

    xid = {"check": "xid", "status": "fail", "code": "xid79", "reason": "GPU 0000:5d:00 fell off the bus"}
    ok = [{"check": "xid", "status": "ok"}, {"check": "gpu_count", "status": "ok"}]
    assert decide(134, [xid, *ok[1:]]).fault                               # SIGABRT (NCCL watchdog) + Xid 79
    assert "xid79" in decide(1, [xid]).why
    assert not decide(0, [xid]).fault                                      # it finished: nothing to redo
    assert not decide(None, [xid]).fault
    f = decide(1, ok)                                                      # its own bug on a healthy node
    assert not f.fault and "healthy node" in f.why
    assert not decide(1, []).fault                                         # no check ran: no evidence
    assert not decide(1, [{"check": "xid", "status": "skip", "reason": "dmesg: permission denied"}]).fault
    assert not decide(1, [{"check": "xid", "status": "warn", "reason": "Xid 13"}]).fault   # application-level


def test_multinode_parts_a_step_is_durable_only_when_every_node_has_its_part(tmp_path):
    """Two nodes, each with its own node-local shard of every step (synthetic: 2 dirs on one machine)."""
    from slurmkit.checkpoint.parts import complete_steps, durable_steps, next_part_to_copy

    assert complete_steps([{"a", "b"}, {"b", "c"}]) == ["b"] and complete_steps([]) == []
    assert next_part_to_copy({"s1": 1, "s2": 2, "s3": 3}, {}, ["s1", "s2"]) == "s2"
    assert next_part_to_copy({"s1": 1, "s3": 3}, {"s1": 1}, ["s1", "s2"]) is None     # follows node 0 only
    assert next_part_to_copy({"s1": 1, "s2": 2}, {"s2": 2}, ["s1", "s2"]) is None     # never goes back
    dest = tmp_path / "durable"
    n0, n1 = tmp_path / "n0", tmp_path / "n1"
    mk = lambda local, rank: Replicator(str(local), str(dest), series="42", keep=3, interval=60, bwlimit_mib=0,  # noqa: E731
                                       nice=0, timeout=60, log=lambda *a, **k: None, part=rank, parts=2)
    r0, r1 = mk(n0, 0), mk(n1, 1)
    from slurmkit.checkpoint.parts import record_parts

    record_parts(str(dest), 2, "42")                  # what node 0's replicator does first
    for s in (1, 2, 3):
        _save(n0, s)
        _save(n1, s)
    assert r1.pass_once() is None                     # node 0 has published nothing yet: node 1 waits
    assert r0.pass_once() == "step-0000000003"
    assert durable_steps(str(dest)) == ([], 2)        # one part of two: not durable
    assert r1.pass_once() == "step-0000000003"
    assert durable_steps(str(dest)) == (["step-0000000003"], 2)
    _save(n0, 4)                                      # node 0 saved step 4, node 1 died before it did
    assert r0.pass_once() == "step-0000000004"
    assert r1.pass_once() is None
    assert durable_steps(str(dest)) == (["step-0000000003"], 2)
    # the job resumes on two fresh nodes: each restores its part of step 3, never the incomplete step 4
    for rank in (0, 1):
        out = restore(str(tmp_path / f"new{rank}"), str(dest), deadline=None, part=rank)
        assert out["restored"] == "step-0000000003", out
        got = checkpoint.latest(str(tmp_path / f"new{rank}"), verify=True)
        assert got.step == 3
    # node 0 came back with its node-local step 4 (that node 1 never made): it resumes from step 3 like node 1
    out = restore(str(n0), str(dest), deadline=None, part=0)
    assert out["hidden"] == ["step-0000000004"] and checkpoint.latest(str(n0)).step == 3
    # checkpoint.latest on DEST itself sees no step-* at its root: an incomplete step is never read as complete
    assert checkpoint.latest(str(dest)) is None


def test_job_part_from_slurms_variables():
    from slurmkit.checkpoint.replicate import job_part

    assert job_part({}) == (None, None, True)
    assert job_part({"SLURM_NNODES": "2"}) == (None, None, True)                      # the batch step's wrapper
    task = {"SLURM_NNODES": "2", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_LOCALID": "0"}
    assert job_part(task) == (1, 2, True)
    assert job_part({**task, "SLURM_LOCALID": "3"}) == (1, 2, False)                  # a node's second task


def test_a_node_fault_is_requeued_by_the_task_that_sees_it():
    """Multi-node: the faulty node's wrapper may not be task 0; it requeues the job itself."""
    from slurmkit.run import requeue_decision

    kw = dict(job_id="7", restarts=0, max_requeues=3, requeue_on=["preemption", "node-fault"], leader=False)
    assert requeue_decision("node-fault", **kw).requeue
    assert not requeue_decision("preemption", **kw).requeue
    assert not requeue_decision("node-fault", **{**kw, "requeue_on": ["preemption"]}).requeue
    assert not requeue_decision("node-fault", **{**kw, "restarts": 3}).requeue
