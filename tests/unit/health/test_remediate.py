"""Remediation's policy (slurmkit/health/remediate.py): a pure function of the node's Slurm record and its own
health-log records. Node records and log records here are SYNTHETIC (built in the test)."""
from datetime import datetime, timezone

import pytest
from hypothesis import given, strategies as st

from slurmkit.health import remediate as R
from slurmkit.settings import HealthSettings
from slurmkit.slurm.records import NodeRecord

PREFIX = "slurmkit:"
NOW = 1_800_000_000.0
DAY = 86400.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(reason="slurmkit:xid79 GPU 0000:5d:00 fell off the bus", state="IDLE", flags=("DRAIN",), **kw):
    return NodeRecord(name="n1", state=state, flags=list(flags), reason=reason, **kw)


def step(action, t, boot="b0"):
    return {"time": iso(t), "node": "n1", "context": "health", "check": "remediate", "status": "warn",
            "action": action, "evidence": {"boot_id": boot, "cause": "xid79"}}


def decide(rec, records=(), limit=3, window=DAY, actions=("RESET_GPU", "RESTART_BM")):
    return R.decide(rec, list(records), prefix=PREFIX, actions=actions, limit=limit, window_seconds=window, now=NOW)


def test_cause_actions_come_from_the_catalog_and_the_signatures():
    assert R.cause_action("xid79") == "RESTART_BM"
    assert R.cause_action("xid_gpulost") == "RESTART_BM"
    assert R.cause_action("sxid20034") == "RESET_GPU"
    assert R.cause_action("ecc") is None and R.cause_action("nccl") is None and R.cause_action(None) is None
    assert R.cause_action("xid13") not in ("RESET_GPU", "RESTART_BM")     # an application error: no reboot


def test_a_slurmkit_drain_for_a_reboot_cause_on_an_idle_node_is_rebooted():
    d = decide(node())
    assert (d.step, d.tag, d.count) == ("reboot", "xid79", 0)


@pytest.mark.parametrize("rec, why", [
    (node(reason="admin: PSU swap ticket 4411"), "not drained by slurmkit"),
    (node(flags=()), "not drained"),
    (node(state="MIXED", flags=("DRAIN",), cpus_alloc=4), "job"),
    (node(flags=("DRAIN", "REBOOT_REQUESTED")), "reboot is under way"),
    (node(state="DOWN"), "slurmd"),
    (node(reason="slurmkit:ecc volatile uncorrectable 3"), "not one a reboot fixes"),
    (node(reason="slurmkit:flapping xid79 x3 in 24h"), "human"),
    (None, "unknown"),
])
def test_no_reboot_where_it_is_not_ours_or_not_safe(rec, why):
    d = decide(rec)
    assert d.step == "none" and why in d.why


def test_an_action_the_site_left_out_is_not_remediated():
    assert decide(node(), actions=("RESET_GPU",)).step == "none"


def test_the_flap_limit_counts_reboots_in_the_window_only():
    recent = [step("reboot-asked", NOW - 3600 * h) for h in (1, 2, 3)]
    d = decide(node(), recent)
    assert (d.step, d.count) == ("flapping", 3)
    assert R.flapping_reason(PREFIX, d.tag, d.count, 24) == "slurmkit:flapping xid79 x3 in 24h"
    old = [step("reboot-asked", NOW - 2 * DAY)] * 5 + recent[:2]
    assert decide(node(), old).step == "reboot"
    # steps that are not reboots do not count
    assert decide(node(), recent[:2] + [step("rebooted", NOW), step("recheck-failed", NOW)]).step == "reboot"


@given(st.lists(st.tuples(st.sampled_from(["reboot-asked", "rebooted", "recheck-passed", "recheck-failed",
                                           "flapping"]), st.floats(0, 3 * DAY)), max_size=30),
       st.integers(1, 10), st.floats(60, 2 * DAY))
def test_policy_reboots_only_below_the_limit(steps_, limit, window):
    records = [step(a, NOW - age) for a, age in steps_]
    d = decide(node(), records, limit=limit, window=window)
    # record times are whole seconds: the reference counts with the same rounding
    asked = sum(1 for a, age in steps_ if a == "reboot-asked" and NOW - R.record_time(step(a, NOW - age)) <= window)
    assert d.count == asked
    assert d.step == ("reboot" if asked < limit else "flapping")


@given(st.lists(st.fixed_dictionaries({"check": st.sampled_from(["remediate", "xid", None]),
                                       "action": st.text(max_size=12), "time": st.text(max_size=25)}),
                max_size=20))
def test_policy_never_raises_on_odd_records(records):
    d = decide(node(), records)
    assert d.step in ("reboot", "flapping")
    assert R.after_reboot(records, "b1") is None or R.after_reboot(records, "b1")["action"] == "reboot-asked"


def test_after_reboot_is_the_first_run_of_a_new_boot_after_our_reboot():
    asked = step("reboot-asked", NOW - 60, boot="b0")
    assert R.after_reboot([asked], "b0") is None              # the same boot: the reboot has not happened yet
    assert R.after_reboot([asked], "b1") is asked
    assert R.after_reboot([asked], None) is None              # an unreadable boot id is no new boot
    assert R.after_reboot([asked, step("rebooted", NOW, boot="b1")], "b1") is None
    assert R.after_reboot([], "b1") is None


def test_reboot_reason_keeps_the_cause_tag_first():
    r = R.reboot_reason(PREFIX, "xid79", 0, 3, "GPU 0000:5d:00 fell off the bus")
    assert r == "slurmkit:xid79 remediation reboot 1/3: GPU 0000:5d:00 fell off the bus"
    assert len(R.reboot_reason(PREFIX, "xid79", 0, 3, "x" * 500)) <= 200


def test_settings_are_off_by_default_and_validated():
    h = HealthSettings()
    assert h.remediate is False and h.remediate_flap_limit == 3 and h.remediate_flap_window_hours == 24
    with pytest.raises(ValueError, match="remediate_actions"):
        HealthSettings(remediate_actions=["RESTART_BM", "REPLACE_GPU"])
    with pytest.raises(ValueError, match="remediate_flap_limit"):
        HealthSettings(remediate_flap_limit=0)


def test_audit_shows_remediation_steps_and_names_flapping(utc_local_time):
    """SYNTHETIC node record and health log: a node drained as flapping after two reboots."""
    from datetime import timedelta
    from slurmkit import audit as A
    from slurmkit.settings import AuditSettings
    rec = NodeRecord(name="n1", state="IDLE", flags=["DRAIN"], reason="slurmkit:flapping xid79 x2 in 24h",
                     reason_user="root", reason_time=iso(NOW)[:-1])
    log = [{"time": iso(NOW - 30), "node": "n1", "context": "health", "check": "xid", "status": "fail",
            "reason": "GPU 0000:5d:00 fell off the bus", "action": "drained", "code": "xid79"},
           step("reboot-asked", NOW - 20), step("recheck-failed", NOW - 10), step("flapping", NOW)]
    table = A.load_causes(AuditSettings().causes_file)
    (entry,) = A.audit([rec], table=table, prefix=PREFIX, now=datetime.fromtimestamp(NOW, timezone.utc),
                       health={"n1": log}, evidence_window=timedelta(minutes=30))
    assert entry.cause.id == "flapping"
    assert [r["action"] for r in entry.evidence if r["check"] == "remediate"][0] == "flapping"


class FakeBackend:
    """A stand-in for Slurm in a unit test of the shell's ordering only (the real Slurm runs in
    tests/integration/test_health_program.py)."""

    def __init__(self, rec):
        self.rec, self.reboots = rec, []

    def nodes(self, name):
        return [self.rec]

    def reboot(self, node, reason):
        self.reboots.append((node, reason))


def test_no_reboot_when_the_count_cannot_be_read_or_written(tmp_path):
    from slurmkit.settings import Settings, PathsSettings
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")                  # the log "directory" is a file: every write fails, root's too
    s = Settings(paths=PathsSettings(state_dir=str(tmp_path / "state"), health_log=str(blocker) + "/"),
                 health=HealthSettings(remediate=True))
    b = FakeBackend(node())
    assert R.act(s, "n1", backend=b, boot_id="b0", records=None) is None and b.reboots == []
    got = R.act(s, "n1", backend=b, boot_id="b0", records=[])
    assert got["action"].startswith("reboot-not-asked") and b.reboots == []


def test_the_reboot_is_counted_before_it_is_asked(tmp_path):
    from slurmkit import healthlog
    from slurmkit.settings import Settings, PathsSettings
    s = Settings(paths=PathsSettings(state_dir=str(tmp_path / "state"), health_log=str(tmp_path / "h") + "/"),
                 health=HealthSettings(remediate=True))
    b = FakeBackend(node())
    got = R.act(s, "n1", backend=b, boot_id="b0", records=[])
    assert got["action"] == "reboot-asked" and b.reboots == [("n1", got["reason"])]
    (rec,) = list(healthlog.read(str(tmp_path / "h") + "/", node="n1"))
    assert rec["action"] == "reboot-asked" and rec["evidence"]["boot_id"] == "b0"


# --- back from the reboot: held until the recheck passes, then resumed by slurmkit (issue 28.8) --------------------

def decide_now(rec, records, healthy):
    return R.decide(rec, list(records), prefix=PREFIX, actions=("RESET_GPU", "RESTART_BM"), limit=3,
                    window_seconds=DAY, now=NOW, healthy=healthy)


BACK = "slurmkit:xid79 remediation reboot 1/3: GPU 0000:5d:00 fell off the bus : reboot issued"


def test_a_node_whose_recheck_passed_is_resumed_only_once_registered_and_healthy():
    done = [step("reboot-asked", NOW - 60), step("held", NOW - 20, boot="b1"), step("rebooted", NOW - 19, boot="b1"),
            step("recheck-passed", NOW - 18, boot="b1")]
    d = decide_now(node(reason=BACK), done, healthy=True)
    assert (d.step, d.tag) == ("resume", "xid79")
    for waiting in (node(reason=BACK, state="DOWN", flags=("DRAIN", "REBOOT_ISSUED")),
                    node(reason=BACK, state="DOWN", flags=("DRAIN", "NOT_RESPONDING"))):
        assert decide_now(waiting, done, healthy=True).step == "none"      # slurmd has not registered yet
    assert decide_now(node(reason=BACK), done, healthy=False).step == "reboot"   # failing again: reboot 2
    assert decide_now(node(reason="admin: PSU"), done, healthy=True).step == "none"   # never over an admin
    back = decide_now(node(reason=BACK, flags=()), done, healthy=True)  # back already, not by slurmkit
    assert (back.step, back.tag) == ("returned", "xid79")
    assert decide_now(node(reason=BACK, flags=()), done + [step("returned", NOW - 3, boot="b1")],
                      healthy=True).step == "none"                               # said once
    assert decide_now(node(reason="", state="DOWN", flags=()), done, healthy=True).step == "none"  # not up yet
    # a recheck that failed is no resume, however the later run went
    failed = done[:3] + [step("recheck-failed", NOW - 18, boot="b1")]
    assert decide_now(node(reason=BACK), failed, healthy=True).step == "reboot"


def test_the_next_reboot_reason_names_the_cause_not_the_last_reboot():
    detail = BACK[len("slurmkit:xid79"):]
    assert R.reboot_reason(PREFIX, "xid79", 1, 3, detail) == \
        "slurmkit:xid79 remediation reboot 2/3: GPU 0000:5d:00 fell off the bus"
    held = R.hold_reason(PREFIX, {"reason": BACK.split(" : ")[0], "evidence": {"cause": "xid79"}})
    assert held.startswith("slurmkit:xid79 remediation reboot 1/3: GPU") and held.endswith("recheck passes)")
    timed_out = held + " : reboot timed out"
    assert R.cause_detail(timed_out, PREFIX, "xid79") == "GPU 0000:5d:00 fell off the bus"
    assert len(R.hold_reason(PREFIX, {"reason": "slurmkit:xid79 " + "x" * 400, "evidence": {}})) <= 200


def test_after_reboot_looks_past_the_hold():
    asked = step("reboot-asked", NOW - 60, boot="b0")
    assert R.after_reboot([asked, step("held", NOW, boot="b1")], "b1") is asked


class DrainRecorder(FakeBackend):
    def __init__(self, rec):
        super().__init__(rec)
        self.drains = []

    def drain(self, node, reason):
        self.drains.append((node, reason))


def test_the_hold_drains_a_node_back_without_its_drain_and_leaves_any_other(tmp_path):
    from slurmkit.settings import Settings, PathsSettings
    s = Settings(paths=PathsSettings(state_dir=str(tmp_path / "state"), health_log=str(tmp_path / "h") + "/"),
                 health=HealthSettings(remediate=True))
    asked = dict(step("reboot-asked", NOW - 60), reason="slurmkit:xid79 remediation reboot 1/3: GPU gone")
    # a reboot that timed out: DOWN, the drain gone (22.05), ReturnToService=2 would return it idle
    b = DrainRecorder(node(reason="slurmkit:xid79 remediation reboot 1/3: GPU gone : reboot timed out",
                           state="DOWN", flags=("NOT_RESPONDING",)))
    got = R.hold(s, "n1", asked, backend=b)
    assert got["action"] == "held" and b.drains == [("n1", R.hold_reason(PREFIX, asked))]
    for kept in (node(state="DOWN", flags=("DRAIN", "REBOOT_ISSUED")), node(reason="admin: PSU")):
        b = DrainRecorder(kept)
        assert R.hold(s, "n1", asked, backend=b) is None and b.drains == []


def test_a_node_slurm_returned_after_a_passed_recheck_is_logged_returned_once(tmp_path):
    # the dev cluster's reboot keeps the host's boot time, so Slurm times it out and drops the drain after the first
    # run of the new boot (22.05 CI, 2026-12-07): the node is in service, and its story ends with `returned`
    from slurmkit import healthlog
    from slurmkit.settings import Settings, PathsSettings
    s = Settings(paths=PathsSettings(state_dir=str(tmp_path / "state"), health_log=str(tmp_path / "h") + "/"),
                 health=HealthSettings(remediate=True))
    done = [step("reboot-asked", NOW - 60), step("rebooted", NOW - 59, boot="b1"),
            step("recheck-passed", NOW - 59, boot="b1")]
    b = FakeBackend(node(reason="", flags=()))
    got = R.act(s, "n1", backend=b, boot_id="b1", records=done)
    assert got["action"] == "returned" and got["status"] == "ok" and b.reboots == []
    (rec,) = list(healthlog.read(str(tmp_path / "h") + "/", node="n1"))
    assert rec["action"] == "returned" and rec["evidence"]["cause"] == "xid79"
    assert R.act(s, "n1", backend=b, boot_id="b1", records=done + [rec]) is None
