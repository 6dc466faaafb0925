"""The health log's two layouts: one file per node (each appended only by its node, rotated by size, read from
the end back to what is needed) and the older single shared file."""
import json
import multiprocessing
import os

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit import healthlog


def rec(node, i, t="2026-11-30T10:00:00Z", **kw):
    return dict({"time": t, "node": node, "check": "xid", "status": "ok", "seq": i}, **kw)


def test_a_directory_is_the_per_node_layout_and_a_jsonl_path_the_single_file(tmp_path):
    assert healthlog.per_node(str(tmp_path))
    assert healthlog.per_node(str(tmp_path / "health") + "/")
    assert healthlog.per_node(str(tmp_path / "health"))          # not there yet, no file suffix
    assert not healthlog.per_node(str(tmp_path / "health.jsonl"))
    d = str(tmp_path / "h")
    healthlog.append(d, [rec("n1", 1), rec("n2", 2), rec("n1", 3)])
    assert sorted(os.listdir(d)) == [".n1.lock", ".n2.lock", "n1.jsonl", "n2.jsonl"]
    assert [r["seq"] for r in healthlog.read(d, node="n1")] == [1, 3]
    assert [r["seq"] for r in healthlog.read(d)] == [1, 3, 2]
    f = str(tmp_path / "health.jsonl")
    healthlog.append(f, [rec("n1", 1), rec("n2", 2)])
    assert [r["seq"] for r in healthlog.read(f, nodes=["n2"])] == [2]


def test_a_node_name_that_would_leave_the_directory_is_refused(tmp_path):
    for bad in ("../x", "a/b", ".hidden", ".."):
        with pytest.raises(ValueError):
            healthlog.append(str(tmp_path), [rec(bad, 1)])
    assert os.listdir(tmp_path) == []


def test_rotation_keeps_a_bounded_number_of_generations(tmp_path):
    d = str(tmp_path)
    line = len(json.dumps(rec("n1", 0)) + "\n")
    for i in range(100):
        healthlog.append(d, rec("n1", i), max_bytes=10 * line + 5, keep=3)
    files = sorted(os.listdir(d))
    assert files == [".n1.lock", "n1.jsonl", "n1.jsonl.1", "n1.jsonl.2", "n1.jsonl.3"]
    seqs = [r["seq"] for r in healthlog.read(d, node="n1")]
    assert seqs == list(range(100 - len(seqs), 100))       # the newest records, in order, none lost in between
    assert 30 < len(seqs) <= 40
    assert all(os.path.getsize(os.path.join(d, f)) <= 10 * line + 5 for f in files if f.startswith("n1"))


def test_the_single_file_is_bounded_as_a_node_file_is_and_the_efficiency_log_shares_it(tmp_path):
    path = str(tmp_path / "health.jsonl")
    line = len(json.dumps(rec("n1", 0)) + "\n")
    for i in range(100):
        healthlog.append(path, [rec("n1", i)], max_bytes=10 * line + 5, keep=2)
    assert sorted(os.listdir(tmp_path)) == [".health.jsonl.lock", "health.jsonl", "health.jsonl.1", "health.jsonl.2"]
    seqs = [r["seq"] for r in healthlog.read(path)]
    assert seqs == list(range(100 - len(seqs), 100)) and 20 < len(seqs) <= 30  # generations read oldest first
    # the job-efficiency log is the same JSON lines: one generation kept, read through the same reader
    from slurmkit.efficiency import record
    eff = str(tmp_path / "efficiency.jsonl")
    for i in range(30):
        record.append(eff, {"job_id": i, "node": "n1", "time": "2026-12-07T00:00:00Z", "end": i}, max_bytes=10 * 80)
    jobs = [r["job_id"] for r in record.read(eff, since=25)]
    assert jobs == [25, 26, 27, 28, 29] and not os.path.exists(eff + ".2")


def test_a_torn_last_line_is_skipped_and_the_next_record_still_reads(tmp_path):
    d = str(tmp_path)
    healthlog.append(d, rec("n1", 1))
    with open(tmp_path / "n1.jsonl", "a") as f:
        f.write('{"time": "2026-11-30T10:00:01Z", "node": "n1", "che')     # a crash mid-write
    assert [r["seq"] for r in healthlog.read(d, node="n1")] == [1]
    healthlog.append(d, rec("n1", 2))
    assert [r["seq"] for r in healthlog.read(d, node="n1")] == [1, 2]


def _writer(args):
    d, node, n = args
    for i in range(n):
        # a record bigger than a pipe buffer and than one 64 KiB read block, every 10th
        healthlog.append(d, rec(node, i, pad="x" * (70000 if i % 10 == 0 else 10)))
    return node


def test_64_processes_appending_to_64_node_files_lose_and_tear_nothing(tmp_path):
    d = str(tmp_path / "log")
    n = 40
    with multiprocessing.get_context("fork").Pool(8) as pool:
        done = pool.map(_writer, [(d, f"n{k:02d}", n) for k in range(64)])
    assert len(done) == 64
    for k in range(64):
        node = f"n{k:02d}"
        with open(os.path.join(d, f"{node}.jsonl")) as f:
            lines = f.read().splitlines()
        assert [json.loads(x)["seq"] for x in lines] == list(range(n))       # every line parses, none lost
        assert [r["seq"] for r in healthlog.read(d, node=node)] == list(range(n))


def _same_node_writer(args):
    d, tag, n = args
    for i in range(n):
        healthlog.append(d, rec("n1", i, writer=tag), max_bytes=8192, keep=1000)


def test_a_prolog_and_an_epilog_of_one_node_rotating_at_once_lose_nothing(tmp_path):
    d = str(tmp_path)
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_same_node_writer, [(d, t, 200) for t in "abcd"])
    got = list(healthlog.read(d, node="n1"))
    assert len(got) == 800
    for t in "abcd":
        assert [r["seq"] for r in got if r["writer"] == t] == list(range(200))


def test_why_the_shared_file_was_replaced_simulated_nfs_append(tmp_path):
    """A documented limitation, shown deterministically (simulated, not a race): an NFS client implements O_APPEND
    as "write at the end as I last saw it". Two nodes that append to one shared file at the same moment both write
    at the same offset, and one record is lost. With one file per node the two writes cannot meet."""
    shared = tmp_path / "health.jsonl"
    shared.write_bytes(b"")
    a = (json.dumps(rec("n1", 1)) + "\n").encode()
    b = (json.dumps(rec("n2", 2)) + "\n").encode()
    eof_seen_by_n1 = os.path.getsize(shared)
    eof_seen_by_n2 = os.path.getsize(shared)            # before n1's write reached the server
    fd = os.open(shared, os.O_WRONLY)
    os.pwrite(fd, a, eof_seen_by_n1)
    os.pwrite(fd, b, eof_seen_by_n2)
    os.close(fd)
    assert [r["node"] for r in healthlog.read(str(shared))] != ["n1", "n2"]     # n1's record is gone (or torn)
    d = str(tmp_path / "per-node")
    for node, data in (("n1", a), ("n2", b)):
        os.makedirs(d, exist_ok=True)
        path = healthlog.node_file(d, node)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, data, 0)                            # each node's own end of its own file
        os.close(fd)
    assert [r["node"] for r in healthlog.read(d)] == ["n1", "n2"]


def test_since_reads_back_only_as_far_as_needed(tmp_path, monkeypatch):
    d = str(tmp_path)
    for day in range(1, 31):
        for h in range(24):
            healthlog.append(d, rec("n1", day * 100 + h, t=f"2026-11-{day:02d}T{h:02d}:00:00Z"),
                             max_bytes=24 * 100, keep=100)
    assert len(healthlog.generations(d, "n1")) > 20
    opened = []
    real = healthlog._lines_backwards
    monkeypatch.setattr(healthlog, "_lines_backwards", lambda p: (opened.append(p), real(p))[1])
    got = list(healthlog.read(d, node="n1", since="2026-11-30T00:00:00Z"))
    assert [r["seq"] for r in got] == [3000 + h for h in range(24)]
    assert len(opened) <= 3                              # the newest files only, not thirty days of them
    opened.clear()
    assert len(list(healthlog.read(d, node="n1"))) == 30 * 24
    assert len(opened) == len(healthlog.generations(d, "n1"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=300), st.integers(0, 10**6)), max_size=40),
       st.integers(1, 4096), st.booleans())
def test_property_the_backwards_reader_returns_every_whole_line(tmp_path_factory, items, block, torn):
    d = str(tmp_path_factory.mktemp("p"))
    recs = [dict(rec("n1", i), text=t) for t, i in items]
    if recs:
        healthlog.append(d, recs)
    if torn:
        with open(os.path.join(d, "n1.jsonl"), "a") as f:
            f.write('{"time": "2026')
    old = healthlog._BLOCK
    healthlog._BLOCK = block
    try:
        assert list(healthlog.read(d, node="n1")) == recs
        assert list(healthlog.read(d, node="n1", since="2000-01-01T00:00:00Z")) == recs
    finally:
        healthlog._BLOCK = old
