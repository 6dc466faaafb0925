from slurmkit.slurm import expand_hostlist, fold_hostlist
from slurmkit.slurm.records import (gres_gpu_count, parse_reason, parse_scontrol_job_oneliner,
                                    parse_scontrol_nodes_oneliner, parse_state)
from slurmkit.slurm.slurm_json import parse_sinfo_json


def test_rocky9_scontrol_oneliner_fixture(fixture_text):
    recs = parse_scontrol_nodes_oneliner(fixture_text("slurm/rocky9-3node-quadro-p1000-scontrol-show-node-o.txt"))
    assert [r.name for r in recs] == ["master", "worker1", "worker2"]
    w1 = recs[1]
    assert (w1.state, w1.flags, w1.reason) == ("IDLE", [], "")
    assert w1.gres == "gpu:quadro_p1000:1(S:0)" and w1.gpus_total == 1
    assert w1.partitions == ["debug", "gpu"] and w1.cpus == 20


def test_dev_cluster_scontrol_and_sinfo_json_agree(fixture_text):
    a = parse_scontrol_nodes_oneliner(
        fixture_text("local/dev-cluster-slurm22.05-scontrol-o-d-show-node-mixed-drain.txt"))
    b = parse_sinfo_json(fixture_text("local/dev-cluster-slurm22.05-sinfo-json-mixed-drain.txt"))
    expected = {
        "n1": ("MIXED", [], 3, "", None),
        "n2": ("IDLE", ["DRAIN"], 0, "slurmkit:xid79 GPU 0000:3b:00 fell off the bus", "root"),
        "n3": ("IDLE", [], 0, "", None),
        "n4": ("IDLE", ["DRAIN"], 0, "admin: PSU swap ticket 4411", "root"),
    }
    for recs in (a, b):
        got = {r.name: (r.state, r.flags, r.gpus_used, r.reason, r.reason_user) for r in recs}
        assert got == expected
        assert all(r.gpus_total == 8 for r in recs)
    assert a[1].reason_time == "2026-11-30T09:16:01"
    assert b[3].reason_time is not None and b[3].reason_time.startswith("2026-11-30T")


def test_states():
    assert parse_state("IDLE+DRAIN") == ("IDLE", ["DRAIN"])
    assert parse_state("drng@") == ("MIXED", ["DRAIN", "REBOOT_REQUESTED"])
    assert parse_state("idle*") == ("IDLE", ["NOT_RESPONDING"])
    assert parse_state("DOWN+NOT_RESPONDING") == ("DOWN", ["NOT_RESPONDING"])
    assert parse_state("fail*") == ("DOWN", ["FAIL", "NOT_RESPONDING"])
    assert parse_state("drained") == ("IDLE", ["DRAIN"])


def test_reasons():
    assert parse_reason("Kill task failed [root@2024-01-05T10:00:00]") == \
        ("Kill task failed", "root", "2024-01-05T10:00:00")
    assert parse_reason("no stamp") == ("no stamp", None, None)
    assert parse_reason("none") == ("", None, None)


def test_gres_counts():
    assert gres_gpu_count("gpu:8") == 8
    assert gres_gpu_count("gpu:a100:4(S:0-1)") == 4
    assert gres_gpu_count("gpu:h100:4,gpu:a100:2(IDX:0-1),nic:2") == 6
    assert gres_gpu_count("gpu:a100:2(IDX:0,3)") == 2
    assert gres_gpu_count("(null)") == 0


def test_job_oneliner():
    line = ("JobId=42 JobName=train UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A Priority=1 "
            "JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 "
            "Partition=gpu AllocNode:Sid=login1:3986 NodeList=n[1-2] Command=/bin/sh")  # synthetic, in scontrol -o layout
    j = parse_scontrol_job_oneliner(line)
    assert (j.job_id, j.name, j.user, j.state, j.restarts, j.nodes) == (42, "train", "alice", "RUNNING", 2, "n[1-2]")
    assert j.partition == "gpu" and j.raw["AllocNode:Sid"] == "login1:3986"


def test_hostlists_use_nodeset():
    assert expand_hostlist("gpu[001-003],n7") == ["gpu001", "gpu002", "gpu003", "n7"]
    assert fold_hostlist(["n1", "n2", "n3", "n7"]) == "n[1-3,7]"


def test_every_hostlist_expansion_is_bounded_before_a_name_is_made():
    """Issue 17 H1: `n[1-99999999]` in a capture, a job's node list or --nodes took gigabytes; every expansion
    now goes through slurmkit.hostlist's bound, which reads the size off the brackets first."""
    import time

    import pytest

    from slurmkit.errors import UsageError
    t = time.monotonic()
    with pytest.raises(UsageError, match="limit"):
        expand_hostlist("n[1-99999999]")
    assert time.monotonic() - t < 5
