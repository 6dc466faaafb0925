"""Every real capture in tests/fixtures/slurm parses (or is refused with a line number), with its records written
out. Issue 8: `slurmkit audit --from-file` must read what admins paste."""
from collections import Counter

import pytest

from slurmkit.slurm.capture import NodeCaptureError, parse_node_capture, parse_scontrol_nodes, parse_sinfo_text
from slurmkit.slurm.records import parse_scontrol_nodes_oneliner


def recs_of(fixture_text, name):
    return parse_node_capture(fixture_text("slurm/" + name))


def row(r):
    return (r.name, r.state_text, r.reason, r.reason_user, r.reason_time, r.gres, r.gpus_total, r.gpus_used,
            r.partitions)


# fixture -> (kind, every record as (name, state, reason, user, time, gres, gpus, gpus used, partitions))
SMALL = {
    "a40-4gpu-scontrol-show-node-idle-slurm24-cn20.txt": ("scontrol", [
        ("cn20-a40", "IDLE", "", None, None, "gpu:4", 4, 0, ["a40"])]),
    "bih-med0304-4xtesla-mixed-drain-psu-reason-slurm20.02-trailing-spaces.txt": ("scontrol", [
        ("med0304", "MIXED+DRAIN", "deep power-off required for PSU", "root", "2020-07-17T13:21:02",
         "gpu:tesla:4(S:0-1)", 4, 0, ["gpu"])]),
    "bih-sinfo-n-gpu-partition-drng-mix-empty-partitions-trailing-spaces.txt": ("sinfo", [
        ("med0304", "MIXED+DRAIN", "", None, None, "", 0, 0, ["gpu"]),
        ("med0301", "MIXED", "", None, None, "", 0, 0, ["gpu"]),
        ("med0302", "MIXED", "", None, None, "", 0, 0, ["gpu"]),
        ("med0303", "MIXED", "", None, None, "", 0, 0, ["gpu"])]),
    "gengwg-sinfo-R-kill-task-failed.txt": ("sinfo", [
        ("node102", "UNKNOWN", "Kill task failed", "root", "2023-04-11T11:42:06", "", 0, 0, [])]),
    "gengwg-sinfo-node-drng.txt": ("sinfo", [
        ("node1", "MIXED+DRAIN", "", None, None, "", 0, 0, ["MyTeam"])]),
    "huji-cs-scontrol-show-node-gpu-mixed-drain-trailing-spaces.txt": ("scontrol", [
        ("cortex-01", "ALLOCATED", "", None, None, "gpu:m60:8", 8, 8, ["short", "killable"]),
        ("dumfries-002", "ALLOCATED", "", None, None, "gpu:rtx2080:4", 4, 4, ["short", "medium", "killable"]),
        ("oxygen-04", "IDLE+DRAIN", "memory issues?", "root", "2019-01-29T10:42:12", "", 0, 0,
         ["short", "medium", "long", "killable"]),
        ("cricket", "IDLE", "", None, None, "gpu:quadro:1(S:0),vmem:2G", 1, 0,
         ["short", "long", "debug", "other", "allowed", "deny"])]),
    "hyperpod-sinfo-R-kill-task-failed-whitespace-collapsed-awsome-185.txt": ("sinfo", [
        ("ip-10-0-1-23", "UNKNOWN", "Kill task failed", "root", "2024-01-25T15:12:23", "", 0, 0, [])]),
    "labshare-sinfo-gresused-nodelist-idx.txt": ("sinfo", [
        ("fb10dl03", "UNKNOWN", "", None, None, "", 0, 2, []),
        ("fb10dl06", "UNKNOWN", "", None, None, "", 0, 3, []),
        ("fb10dl07", "UNKNOWN", "", None, None, "", 0, 4, []),
        ("fb10dl08", "UNKNOWN", "", None, None, "", 0, 1, []),
        ("fb10dl09", "UNKNOWN", "", None, None, "", 0, 3, []),
        ("resterampe", "UNKNOWN", "", None, None, "", 0, 2, []),
        ("fb10dl04", "UNKNOWN", "", None, None, "", 0, 0, []),
        ("fb10dl05", "UNKNOWN", "", None, None, "", 0, 0, [])]),
    "life1-cpu-node-scontrol-show-node-slurm19-paste-glitch.txt": ("scontrol", [
        ("life1", "MIXED", "", None, None, "", 0, 0, ["debug"])]),
    "life1-cpu-node-sinfo-Node-long-mixed.txt": ("sinfo", [
        ("life1", "MIXED", "", None, None, "", 0, 0, ["debug"])]),
    "nchc-nano4-hgpn01-h100x8-scontrol-show-node-slurm23.11-corespec-mixed.txt": ("scontrol", [
        ("hgpn01", "MIXED", "", None, None, "gpu:H100:8(S:0-1)", 8, 2, ["dev"])]),
    "oci-vm-gpu2-sinfo-drain-citc-11.txt": ("sinfo", [
        (f"compute00{i}", "IDLE+DRAIN", "", None, None, "", 0, 0, ["compute"]) for i in (1, 2, 3)]),
    "oci-vm-gpu2-sinfo-list-reasons-format-low-realmemory-citc-11.txt": ("sinfo", [
        (f"compute00{i}", "UNKNOWN", "Low RealMemory", None, None, "", 0, 0, []) for i in (1, 2, 3)]),
    "rocky9-3node-quadro-p1000-scontrol-show-node-d.txt": ("scontrol", [
        ("master", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, ["debug"]),
        ("worker1", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, ["debug", "gpu"]),
        ("worker2", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, ["debug", "gpu"])]),
    "rocky9-3node-quadro-p1000-scontrol-show-node-o.txt": ("scontrol-oneliner", [
        ("master", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, ["debug"]),
        ("worker1", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, ["debug", "gpu"]),
        ("worker2", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, ["debug", "gpu"])]),
    "rocky9-3node-quadro-p1000-sinfo-N-h-o-N-t-G-duplicate-rows.txt": ("sinfo", [
        ("master", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, []),
        ("worker1", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, []),
        ("worker2", "IDLE", "", None, None, "gpu:quadro_p1000:1(S:0)", 1, 0, [])]),
    "rtx3090-scontrol-show-node-idle-drain-gres-count-lower-awsome-195.txt": ("scontrol", [
        ("yigou-dev-102-68", "IDLE+DRAIN", "gres/gpu count reported lower than configured (0 < 1)", "slurm",
         "2024-12-19T11:03:34", "gpu:nvidia-rtx-3090:1", 1, 0, ["compute100"])]),
    "rtx6000ada-8gpu-scontrol-show-node-down-not-responding.txt": ("scontrol", [
        ("rtx6000-ada", "DOWN+NOT_RESPONDING", "Not responding", "root", "2026-06-11T16:16:23", "gpu:8(S:0-1)", 8,
         0, ["rtx6000-ada"])]),
    "rwth-claix23-n23g0002-h100-mixed-gres-socket-range.txt": ("scontrol", [
        ("n23g0002", "MIXED", "", None, None, "gpu:hopper:4(S:0-7)", 4, 4, ["c23g", "c23g_low"])]),
    "twcc-gn0101-8gpu-untyped-gres-idle-drain-node-switch-slurm17.11-fqdn.txt": ("scontrol", [
        ("gn0101.twcc.ai", "IDLE+DRAIN", "node-switch", "root", "2018-11-23T12:49:03", "gpu:8", 8, 0,
         ["SlurmDefault"])]),
}

# files that are not node listings: refused with the line and what they are instead
REFUSED = {
    "gengwg-scontrol-update-invalid-node-state.txt": "Slurm error message",
    "hyperpod-slurmd-syslog-pyxis-epilog-permission-denied-awsome-185.txt": "slurmd log",
    "login02-scontrol-show-node-grep-gres-gpu-cfgtres.txt": "without its NodeName= lines",
    "sherlock-sh03-12n09-scontrol-grep-gres-alloctres.txt": "without its NodeName= lines",
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_fixture_records(fixture_text, name):
    kind, recs = recs_of(fixture_text, name)
    want_kind, want = SMALL[name]
    assert kind == want_kind
    assert [row(r) for r in recs] == want


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_not_node_output_is_refused_with_its_line(fixture_text, name):
    with pytest.raises(NodeCaptureError) as e:
        recs_of(fixture_text, name)
    assert REFUSED[name] in str(e.value)
    assert e.value.line == 1


def test_arjuna_default_sinfo_states_and_partitions(fixture_text):
    kind, recs = recs_of(fixture_text, "arjuna-sinfo-drng-at-fail-star-maint-mix-69.txt")
    assert kind == "sinfo" and len(recs) == 87
    assert Counter(r.state_text for r in recs) == {"MIXED+DRAIN+REBOOT_REQUESTED": 67, "MIXED": 9,
                                                   "IDLE+MAINTENANCE": 5, "DOWN+FAIL+NOT_RESPONDING": 4, "IDLE": 2}
    by = {r.name: r for r in recs}
    assert row(by["f005"]) == ("f005", "DOWN+FAIL+NOT_RESPONDING", "", None, None, "", 0, 0, ["cpu"])
    assert by["e001"].partitions == ["debug", "idle"]          # "debug*": the default mark is not a name
    assert "f005" not in [n for n in by if n.startswith("f0") and by[n].state == "MIXED"]


def test_login02_sinfo_t_idle(fixture_text):
    kind, recs = recs_of(fixture_text, "login02-sinfo-t-idle-resv-drain.txt")
    assert len(recs) == 18
    by = {r.name: r for r in recs}
    assert row(by["gpu-sm02-16"]) == ("gpu-sm02-16", "IDLE+DRAIN", "", None, None, "", 0, 0,
                                      ["interactive", "preempted"])
    assert by["login-01"].state_text == "IDLE+DRAIN" and by["gpu-h-5"].state_text == "IDLE+RESERVED"
    assert Counter(r.state_text for r in recs) == {"IDLE": 13, "IDLE+RESERVED": 3, "IDLE+DRAIN": 2}


def test_nchc_sinfo_s_then_sinfo(fixture_text):
    kind, recs = recs_of(fixture_text, "nchc-nano4-128x-h100-sinfo-s-and-sinfo-6-partitions-mix-idle.txt")
    assert len(recs) == 128     # the `sinfo -s` summary rows give no node; the default listing gives all 128
    assert Counter(r.state for r in recs) == {"MIXED": 99, "IDLE": 29}
    by = {r.name: r for r in recs}
    assert by["25a-hgpn036"].state == "IDLE" and by["25a-hgpn145"].state == "MIXED"
    assert by["25a-hgpn001"].partitions == ["dev", "8gpus", "16gpus", "32gpus", "64gpus", "256gpus"]


def test_unige_sinfo_R_truncated_reasons(fixture_text):
    kind, recs = recs_of(fixture_text, "unige-baobab-sinfo-R-gres-gpu-reasons-truncated.txt")
    assert len(recs) == 49
    assert Counter(r.reason for r in recs) == {"gres/gpu GRES core s": 44, "gres/gpu count repor": 2,
                                               "issue-5894": 1, "issue-6543": 1, "issue-5958": 1}
    by = {r.name: r for r in recs}
    assert row(by["gpu002"]) == ("gpu002", "UNKNOWN", "gres/gpu count repor", "slurm", "2025-04-02T15:47:44", "",
                                 0, 0, [])
    assert (by["cpu242"].reason_user, by["cpu242"].reason_time) == ("root", "2025-04-02T16:01:38")
    assert by["gpu049"].reason == "gres/gpu GRES core s"


def test_multiline_and_oneliner_scontrol_agree(fixture_text):
    multi = parse_scontrol_nodes(fixture_text("slurm/rocky9-3node-quadro-p1000-scontrol-show-node-d.txt"))
    one = parse_scontrol_nodes(fixture_text("slurm/rocky9-3node-quadro-p1000-scontrol-show-node-o.txt"))
    old = parse_scontrol_nodes_oneliner(fixture_text("slurm/rocky9-3node-quadro-p1000-scontrol-show-node-o.txt"))
    assert [row(r) for r in multi] == [row(r) for r in one] == [row(r) for r in old]


def test_multiline_values_stay_on_their_line(fixture_text):
    # the pasted "R#SBATCH ealMemory=" garbage must not leak into OS= or break the record
    (r,) = parse_scontrol_nodes(fixture_text("slurm/life1-cpu-node-scontrol-show-node-slurm19-paste-glitch.txt"))
    assert (r.cpus, r.cpus_alloc) == (16, 8)


def test_dev_cluster_capture_parses_as_before(fixture_text):
    text = fixture_text("local/dev-cluster-slurm22.05-scontrol-o-d-show-node-mixed-drain.txt")
    assert [row(r) for r in parse_node_capture(text)[1]] == [row(r) for r in parse_scontrol_nodes_oneliner(text)]
    kind, recs = parse_node_capture(fixture_text("local/dev-cluster-slurm22.05-sinfo-json-mixed-drain.txt"))
    assert kind == "sinfo-json" and [r.name for r in recs] == ["n1", "n2", "n3", "n4"]


def test_pipe_layouts_synthetic():
    # synthetic: `sinfo -R -h -o '%N|%u|%H|%E'` and `sinfo -h -N -o '%N|%T|%G|%E'` in the layout Slurm prints
    recs = parse_sinfo_text("n[2-3]|root|2026-11-30T09:16:01|slurmkit:xid79 GPU 0000:3b:00 fell off | the bus\n"
                            "n4|slurm|Unknown|Prolog error\n")
    assert [(r.name, r.state, r.reason, r.reason_user, r.reason_time) for r in recs] == [
        ("n2", "UNKNOWN", "slurmkit:xid79 GPU 0000:3b:00 fell off | the bus", "root", "2026-11-30T09:16:01"),
        ("n3", "UNKNOWN", "slurmkit:xid79 GPU 0000:3b:00 fell off | the bus", "root", "2026-11-30T09:16:01"),
        ("n4", "UNKNOWN", "Prolog error", "slurm", None)]
    recs = parse_sinfo_text("n1|mixed|gpu:8|none\nn2|drained|gpu:8|admin: PSU\n")
    assert [(r.name, r.state_text, r.gpus_total, r.reason) for r in recs] == [
        ("n1", "MIXED", 8, ""), ("n2", "IDLE+DRAIN", 8, "admin: PSU")]
    recs = parse_sinfo_text("NODELIST|USER|TIMESTAMP|REASON\nn1|root|2026-11-30T09:00:00|x y\n")
    assert [(r.name, r.reason, r.reason_user) for r in recs] == [("n1", "x y", "root")]


def test_empty_and_garbage_refused():
    with pytest.raises(NodeCaptureError, match="empty"):
        parse_node_capture("\n\n")
    with pytest.raises(NodeCaptureError) as e:
        parse_node_capture("\nhello world\n")
    assert e.value.line == 2
    with pytest.raises(NodeCaptureError, match="sinfo --json"):
        parse_node_capture('{"nodes": [{"state": "idle"}]}')


# captured on the dev cluster (tests/fixtures/local, see FIXTURES-PROVENANCE.md): an admin drain on n2, a plain failing
# prolog on n4 (Slurm's own "Prolog error"), in four layouts; each must say the same thing
LOCAL = "local/dev-cluster-slurm22.05-{}-admin-and-prolog-error.txt"


@pytest.mark.parametrize("layout,kind,n2_reason,states", [
    ("sinfo-R-pipe", "sinfo", "admin: PSU swap ticket 4411", None),
    ("sinfo-R-default", "sinfo", "admin: PSU swap tick", None),
    ("scontrol-show-node", "scontrol", "admin: PSU swap ticket 4411",
     {"n1": "IDLE", "n2": "IDLE+DRAIN", "n3": "IDLE", "n4": "IDLE+DRAIN"}),
])
def test_dev_cluster_layouts(fixture_text, layout, kind, n2_reason, states):
    got_kind, recs = parse_node_capture(fixture_text(LOCAL.format(layout)))
    assert got_kind == kind
    by = {r.name: r for r in recs}
    assert (by["n2"].reason, by["n2"].reason_user, by["n2"].reason_time) == \
        (n2_reason, "root", "2026-11-30T09:32:09")
    assert (by["n4"].reason, by["n4"].reason_user, by["n4"].reason_time) == \
        ("Prolog error", "root", "2026-11-30T09:32:10")
    if states:
        assert {r.name: r.state_text for r in recs} == states
        assert all(r.gpus_total == 8 for r in recs) and by["n1"].partitions == ["gpu"]
    else:
        assert sorted(by) == ["n2", "n4"]


def test_dev_cluster_default_sinfo(fixture_text):
    kind, recs = parse_node_capture(fixture_text(LOCAL.format("sinfo-default")))
    assert [(r.name, r.state_text, r.partitions) for r in recs] == [
        ("n2", "IDLE+DRAIN", ["gpu"]), ("n4", "IDLE+DRAIN", ["gpu"]), ("n1", "IDLE", ["gpu"]), ("n3", "IDLE", ["gpu"])]
