"""Every reader over real captures of Slurm 22.05.8, 24.11.5, 25.11.7 and 26.05.5 (tests/fixtures/local/slurm-*/, made by
dev/capture_slurm.py on the dev clusters), with the records each must give written out."""
import re
from pathlib import Path

import pytest

from slurmkit.slurm.capture import NodeCaptureError, parse_node_capture, parse_scontrol_nodes
from slurmkit.slurm.records import parse_scontrol_nodes_oneliner
from slurmkit.slurm.slurm_json import (SlurmFormatError, parse_nodes_json, parse_scontrol_nodes_json,
                                       parse_sinfo_json, parse_squeue_json, read_meta, load)

pytestmark = pytest.mark.usefixtures("utc_local_time")

LOCAL = Path(__file__).resolve().parents[2] / "fixtures" / "local"
VERSIONS = {"22.05": ("22.05.8", 38), "24.11": ("24.11.5", 42), "25.11": ("25.11.7", 44), "26.05": ("26.05.5", 45)}
STATES = ["idle", "drained", "slurmkit-drain", "gpu-job", "resumed"]
ADMIN = "admin: PSU swap ticket 4411"
SK = "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"
IDLE = ("IDLE", "", None, 0)
KEEPS_REASON = {"24.11", "25.11"}   # measured: after a resume the idle node keeps its reason there


def expected(version: str, state: str) -> dict[str, tuple]:
    """name -> (state_text, reason, reason_user, gpus_used) as the cluster was in `state`."""
    n = {name: IDLE for name in ("n1", "n2", "n3", "n4")}
    i = STATES.index(state)
    if i >= 1:
        n["n4"] = ("IDLE+DRAIN", ADMIN, "root", 0)
    if i >= 2:
        n["n2"] = ("IDLE+DRAIN", SK, "root", 0)
    if i >= 3:
        n["n1"] = ("MIXED", "", None, 2)
    if i >= 4:   # a resume: 24.11 and 25.11 keep the old reason on the idle node, 22.05 and 26.05 clear it
        n["n2"] = ("IDLE", SK, "root", 0) if version in KEEPS_REASON else IDLE
    return n


def text(version, stem, state):
    return (LOCAL / f"slurm-{version}" / f"{stem}-{state}.txt").read_text()


def got(recs):
    return {r.name: (r.state_text, r.reason, r.reason_user, r.gpus_used) for r in recs}




def reason_times(version, state):
    """From the scontrol text capture of the same moment: node -> 'YYYY-MM-DDTHH:MM:SS'."""
    out = {}
    for line in text(version, "scontrol-o-d-show-node", state).splitlines():
        m = re.search(r"^NodeName=(\S+).*Reason=.*\[\w+@(\S+)\]$", line)
        if m:
            out[m[1]] = m[2]
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("state", STATES)
def test_scontrol_text_every_version(version, state):
    recs = parse_scontrol_nodes_oneliner(text(version, "scontrol-o-d-show-node", state))
    assert got(recs) == expected(version, state)
    assert all(r.gpus_total == 8 and r.partitions == ["gpu"] and r.cpus == 16 for r in recs)
    assert {r.name: r.reason_time for r in recs if r.reason} == reason_times(version, state)
    # the multi-line layout without -d has no GresUsed (and AllocTRES no gres/gpu): no GPUs in use
    multi = parse_scontrol_nodes(text(version, "scontrol-show-node", state))
    assert got(multi) == {k: v[:3] + (0,) for k, v in expected(version, state).items()}


@pytest.mark.parametrize("version", ["24.11", "25.11", "26.05"])
@pytest.mark.parametrize("state", STATES)
def test_scontrol_json_matches_text(version, state):
    doc = text(version, "scontrol-json-d-show-node", state)
    recs = parse_scontrol_nodes_json(doc)
    assert got(recs) == expected(version, state)
    assert {r.name: r.reason_time for r in recs if r.reason} == reason_times(version, state)
    assert all(r.gpus_total == 8 and r.partitions == ["gpu"] and r.cpus == 16 for r in recs)
    assert [r.cpus_alloc for r in recs] == [1 if state in ("gpu-job", "resumed") else 0, 0, 0, 0]
    assert parse_node_capture(doc) == ("scontrol-json", recs)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("state", STATES)
def test_sinfo_json(version, state):
    doc = text(version, "sinfo-json", state)
    meta = read_meta(load(doc, "x"))
    assert (meta.release, meta.parser) == VERSIONS[version]
    want = expected(version, state)
    if version != "22.05" and state in ("slurmkit-drain", "gpu-job"):
        # n2 and n4 are one IDLE+DRAIN group there, under n2's reason only: refused, never n4 as slurmkit's
        with pytest.raises(SlurmFormatError) as e:
            parse_sinfo_json(doc)
        msg = str(e.value)
        assert f"Slurm {VERSIONS[version][0]}" in msg and f"v0.0.{VERSIONS[version][1]}" in msg
        assert "2 nodes (n2,n4)" in msg and "scontrol --json show node" in msg
        with pytest.raises(NodeCaptureError):
            parse_node_capture(doc)
        return
    if version in KEEPS_REASON and state == "resumed":
        want["n2"] = IDLE   # grouped with n3 (in service): the group's kept reason is dropped, not given to n3
    recs = parse_sinfo_json(doc)
    assert got(recs) == want
    assert all(r.gpus_total == 8 and r.partitions == ["gpu"] and r.cpus == 16 for r in recs)
    times = reason_times(version, state)
    assert {r.name: r.reason_time for r in recs if r.reason} == {k: v for k, v in times.items() if want[k][1]}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("state", STATES)
def test_squeue_json(version, state):
    jobs = parse_squeue_json(text(version, "squeue-json", state))
    if state in ("gpu-job", "resumed"):
        assert [(j.job_id, j.name, j.state, j.nodes, j.user, j.partition, j.exit_code, j.restarts)
                for j in jobs] == [(1, "capture-gpu", "RUNNING", "n1", "root", "gpu", "0:0", 0)]
    else:
        assert jobs == []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("state", STATES)
def test_sinfo_R(version, state):
    t = text(version, "sinfo-R", state)
    want = {k: v for k, v in expected(version, state).items() if v[0].endswith("DRAIN")}
    if not want:
        with pytest.raises(NodeCaptureError):   # the header alone: nothing to read
            parse_node_capture(t)
        return
    kind, recs = parse_node_capture(t)
    # sinfo -R cuts reasons at 20 characters and has no state
    assert {r.name: (r.reason, r.reason_user) for r in recs} == {k: (v[1][:20], v[2]) for k, v in want.items()}


def test_unknown_version_is_an_error_naming_it():
    doc = text("24.11", "scontrol-json-d-show-node", "idle").replace('v0.0.42"', 'v0.0.51"')
    with pytest.raises(SlurmFormatError) as e:
        parse_scontrol_nodes_json(doc)
    assert "Slurm 24.11.5" in str(e.value) and "v0.0.51" in str(e.value) and "v0.0.39 to v0.0.45" in str(e.value)
    with pytest.raises(NodeCaptureError) as e2:
        parse_node_capture(doc)
    assert "v0.0.51" in str(e2.value) and e2.value.line == 1


def test_grouped_sinfo_with_a_22_05_version_is_refused():
    """synthetic: a 24.11 document that claims v0.0.38 has no per-node `nodes`: an error, never []."""
    doc = text("24.11", "sinfo-json", "idle").replace('v0.0.42"', 'v0.0.38"')
    with pytest.raises(SlurmFormatError, match=r"no top-level `nodes`.*v0\.0\.37/38"):
        parse_sinfo_json(doc)


def test_controller_down_errors_and_no_nodes():
    """synthetic, in the v0.0.42 shape: slurmctld down -> `errors` and `"nodes": []`: an error naming both."""
    doc = ('{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}, "slurm": {"release": "24.11.5"}},'
           ' "errors": [{"description": "Unable to contact slurm controller (connect failure)",'
           ' "error_number": 1007, "error": "Unable to contact slurm controller", "source": "slurm_load_node"}],'
           ' "warnings": [], "nodes": []}')
    for parse in (parse_scontrol_nodes_json, lambda t: parse_nodes_json(t, "f")[1]):
        with pytest.raises(SlurmFormatError) as e:
            parse(doc)
        assert "no nodes" in str(e.value) and "Unable to contact slurm controller" in str(e.value)
        assert "Slurm 24.11.5" in str(e.value)
    with pytest.raises(SlurmFormatError, match="no nodes and Slurm's errors"):
        parse_sinfo_json(doc.replace('"nodes": []', '"sinfo": []'))


def test_wrong_types_are_the_clear_error():
    """issue 17 U2: a string where an object belongs ('str' object has no attribute 'get') -> SlurmFormatError."""
    good = text("26.05", "sinfo-json", "drained")
    bad = good.replace('"reason": {', '"reasonX": {', 1).replace('"gres": {', '"gres": "gpu:8", "x": {', 1)
    with pytest.raises(SlurmFormatError, match=r"sinfo\[0\]\.gres is a string.*expected an object"):
        parse_sinfo_json(bad)
    doc = '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "nodes": ["n1"]}'
    with pytest.raises(SlurmFormatError, match=r"nodes\[0\] is a string"):
        parse_scontrol_nodes_json(doc)
    with pytest.raises(NodeCaptureError, match="not JSON"):
        parse_node_capture("{not json")


def test_squeue_capture_is_not_node_output():
    with pytest.raises(NodeCaptureError, match="squeue --json"):
        parse_node_capture(text("24.11", "squeue-json", "gpu-job"))


def test_22_05_fixture_still_reads():
    recs = parse_sinfo_json((LOCAL / "dev-cluster-slurm22.05-sinfo-json-mixed-drain.txt").read_text())
    assert [r.name for r in recs] == ["n1", "n2", "n3", "n4"] and recs[0].gpus_used == 3


def test_pasted_default_sinfo_names_nodes_by_hostlist():
    """synthetic pastes of default `sinfo` (with and without header) and `sinfo -o '%D %t %N'`."""
    with_header = ("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
                   "gpu*         up   infinite      2  drain n[2,4]\n"
                   "gpu*         up   infinite      1  down$ n5\n"
                   "gpu*         up   infinite      3  fail* n[6-8]\n"
                   "gpu*         up   infinite      1  maint n9\n"
                   "gpu*         up   infinite      1   idle n1\n")
    no_header = with_header.split("\n", 1)[1]
    counts = "NODES STATE NODELIST\n2 drain n[2,4]\n1 down$ n5\n3 fail* n[6-8]\n1 maint n9\n1 idle n1\n"
    want = {"n1": "IDLE", "n2": "IDLE+DRAIN", "n4": "IDLE+DRAIN", "n5": "DOWN+MAINTENANCE",
            "n6": "DOWN+FAIL+NOT_RESPONDING", "n7": "DOWN+FAIL+NOT_RESPONDING", "n8": "DOWN+FAIL+NOT_RESPONDING",
            "n9": "IDLE+MAINTENANCE"}
    for t in (with_header, no_header, counts, counts.split("\n", 1)[1]):
        kind, recs = parse_node_capture(t)
        assert kind == "sinfo"
        assert {r.name: r.state_text for r in recs} == want, t
    assert {r.partitions[0] for r in parse_node_capture(no_header)[1]} == {"gpu"}


def test_real_default_sinfo_capture_reads_hostlists(fixture_text):
    kind, recs = parse_node_capture(fixture_text("local/dev-cluster-slurm22.05-sinfo-default-admin-and-prolog-error.txt"))
    assert all(not r.name.isdigit() for r in recs) and recs


def test_versions_table_is_complete():
    for v in VERSIONS:
        names = {p.name for p in (LOCAL / f"slurm-{v}").iterdir()}
        for state in STATES:
            assert f"sinfo-json-{state}.txt" in names and f"scontrol-o-d-show-node-{state}.txt" in names


@pytest.mark.parametrize("version", VERSIONS)
def test_audit_after_a_resume(version):
    """24.11/25.11 keep the old reason on the resumed idle node: audit must not call it out of service."""
    from datetime import datetime, timezone

    from slurmkit.audit import audit, load_causes
    stem = "sinfo-json" if version == "22.05" else "scontrol-json-d-show-node"
    recs = parse_node_capture(text(version, stem, "resumed"))[1]
    n2 = next(r for r in recs if r.name == "n2")
    assert n2.reason == (SK if version in KEEPS_REASON else "")
    entries = audit(recs, table=load_causes(), prefix="slurmkit:", now=datetime.now(timezone.utc))
    assert [(e.node.name, e.by) for e in entries] == [("n4", "admin")]
    entries = audit(parse_node_capture(text(version, stem, "gpu-job"))[1], table=load_causes(),
                    prefix="slurmkit:", now=datetime.now(timezone.utc))
    assert sorted((e.node.name, e.by, e.check) for e in entries) == [("n2", "slurmkit", "xid"), ("n4", "admin", None)]


def test_23_02_lists_a_node_once_per_partition_merged():
    """synthetic, in 23.02's v0.0.39 shape (meta.plugins, meta.Slurm, one group per partition): one record."""
    def group(part, names, state, reason=None):
        return {"node": {"state": state}, "nodes": {"nodes": names, "total": len(names)},
                "cpus": {"allocated": 0, "total": 16 * len(names), "minimum": 16, "maximum": 16},
                "gres": {"total": "gpu:8", "used": "gpu:0"}, "partition": {"name": part},
                "reason": {"description": reason or "", "time": 1796118330 if reason else 0, "user": "root"}}
    doc = {"meta": {"plugins": {"data_parser": "data_parser/v0.0.39"},
                    "Slurm": {"version": {"major": 23, "minor": 2, "micro": 7}, "release": "23.02.7"}},
           "sinfo": [group("gpu", ["n1", "n2"], ["IDLE"]), group("debug", ["n1"], ["IDLE"]),
                     group("gpu", ["n4"], ["IDLE", "DRAIN"], ADMIN), group("debug", ["n4"], ["IDLE", "DRAIN"], ADMIN)],
           "errors": [], "warnings": []}
    import json
    recs = parse_sinfo_json(json.dumps(doc))
    assert [(r.name, r.state_text, r.partitions, r.reason, r.reason_user, r.cpus) for r in recs] == [
        ("n1", "IDLE", ["gpu", "debug"], "", None, 16), ("n2", "IDLE", ["gpu"], "", None, 16),
        ("n4", "IDLE+DRAIN", ["gpu", "debug"], ADMIN, "root", 16)]
    assert recs[2].reason_time == "2026-12-01T09:45:30"
    assert read_meta(doc).release == "23.02.7" and read_meta(doc).parser == 39
