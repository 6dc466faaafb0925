"""Issue 35: audit reads Slurm's words exactly: a reason Slurm kept from before a resume is history, not the cause of
a new state (35.3), and a node whose last job is still completing is draining whichever source said so (35.4).

The records are `scontrol -o -d show node` lines. Real ones come from tests/fixtures/local/; the lines for states the
captures do not hold are synthetic, each modelled field for field on what Slurm 24.11.5 printed on the dev cluster
(2026-12-02, this issue's runs) and named so below. The same moments on a real Slurm (22.05, 24.11, 26.05) are in
tests/integration/test_slurm_words.py."""
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurmkit import audit as A
from slurmkit.slurm.capture import parse_node_capture
from slurmkit.slurm.records import current_reason, parse_scontrol_nodes_oneliner

pytestmark = pytest.mark.usefixtures("utc_local_time")
LOCAL = Path(__file__).resolve().parents[2] / "fixtures" / "local"
TABLE = A.load_causes()
NOW = datetime(2026, 12, 2, 7, 0, tzinfo=timezone.utc)
XID = "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"
TAIL = "Gres=gpu:8 GresUsed=gpu:0 Partitions=gpu BootTime=2026-12-02T06:29:26 SlurmdStartTime=2026-12-02T06:50:59"


def rec(line):
    (r,) = parse_scontrol_nodes_oneliner(line)
    return r


def entry(r):
    (e,) = A.audit([r], table=TABLE, prefix="slurmkit:", now=NOW)
    return e


def test_a_resumed_nodes_reason_is_kept_by_24_11_and_is_in_service():
    """Real: 24.11 keeps the reason on the resumed idle n2, set before the resume (LastBusyTime moved on it)."""
    text = (LOCAL / "slurm-24.11" / "scontrol-o-d-show-node-resumed.txt").read_text()
    n2 = next(r for r in parse_scontrol_nodes_oneliner(text) if r.name == "n2")
    assert n2.state_text == "IDLE" and n2.reason == XID and n2.reason_time < n2.last_busy
    assert not A.out_of_service(n2)


def test_not_responding_under_a_reason_from_before_the_resume_is_not_that_cause():
    # synthetic (24.11.5 printed this ~30 s after slurmd of the resumed n2 stopped): the old reason, older than
    # LastBusyTime (the resume)
    r = rec(f"NodeName=n2 State=IDLE+NOT_RESPONDING {TAIL} LastBusyTime=2026-12-02T06:51:04 "
            f"Reason={XID} [root@2026-12-02T06:51:01]")
    assert current_reason(r) == ("Not responding", XID, True)
    e = entry(r)
    assert (e.by, e.cause.id, e.check, e.node.reason) == ("slurm", "not-responding", None, "Not responding")
    assert e.history == {"reason": XID, "user": "root", "time": "2026-12-02T06:51:01"}
    assert e.age_seconds is None   # when it stopped answering is not in the record; the old reason's time is not it
    d = e.to_dict()
    assert d["reason_history"]["reason"] == XID and d["by"] == "slurm" and d["reason_time"] is None


def test_down_with_slurms_words_appended_to_an_old_reason_is_not_that_cause():
    # synthetic (24.11.5 printed this once the same n2 was DOWN: " : Not responding" appended, a new time)
    r = rec(f"NodeName=n2 State=DOWN+NOT_RESPONDING {TAIL} LastBusyTime=2026-12-02T06:51:04 "
            f"Reason={XID} : Not responding [root@2026-12-02T06:51:55]")
    e = entry(r)
    assert (e.by, e.cause.id, e.node.reason, e.node.reason_time) == ("slurm", "not-responding", "Not responding",
                                                                     "2026-12-02T06:51:55")
    assert e.history == {"reason": XID, "user": None, "time": None}
    assert e.age_seconds == (NOW - datetime(2026, 12, 2, 6, 51, 55, tzinfo=timezone.utc)).total_seconds()


def test_a_drained_nodes_reason_is_current_even_when_older_than_last_busy():
    # synthetic (24.11.5: drained under a running job; the job left 4 s later and moved LastBusyTime)
    r = rec(f"NodeName=n4 State=IDLE+DRAIN {TAIL} LastBusyTime=2026-12-02T06:53:16 "
            f"Reason={XID} [root@2026-12-02T06:53:12]")
    assert current_reason(r) == (XID, None, False)
    e = entry(r)
    assert (e.by, e.cause.id, e.history) == ("slurmkit", "xid79-fell-off-bus", None)
    # drained and then not responding: still slurmkit's drain, Slurm's words appended or not
    r = rec(f"NodeName=n4 State=DOWN+DRAIN+NOT_RESPONDING {TAIL} LastBusyTime=2026-12-02T06:53:16 "
            f"Reason={XID} [root@2026-12-02T06:53:12]")
    assert entry(r).by == "slurmkit"


def test_not_responding_with_no_reason_yet_is_not_responding():
    # real shape (22.05.8 on the dev cluster: IDLE+NOT_RESPONDING with no Reason= before it turns DOWN)
    r = rec(f"NodeName=n2 State=IDLE+NOT_RESPONDING {TAIL} LastBusyTime=2026-12-02T06:48:43")
    assert (entry(r).by, entry(r).cause.id) == ("slurm", "not-responding")


def test_draining_while_the_last_job_completes_whichever_source_says_it():
    """Issue 35.4: scontrol (and sinfo --json, scontrol --json) say IDLE+COMPLETING+DRAIN while the last job's epilog
    runs; `sinfo -o %T` words the same moment 'draining'. Both are the same condition: draining."""
    # synthetic scontrol line (22.05.8 printed State=IDLE+COMPLETING+DRAIN while a cancelled job's epilog ran)
    live = rec(f"NodeName=n3 State=IDLE+COMPLETING+DRAIN {TAIL} LastBusyTime=2026-12-02T06:55:02 "
               f"Reason={XID} [root@2026-12-02T06:56:05]")
    _, (sinfo,) = parse_node_capture("n3|draining|gpu:8|" + XID + "\n")   # synthetic sinfo -h -N -o '%N|%T|%G|%E'
    assert A.condition(live) == A.condition(sinfo) == "draining"
    done = rec(f"NodeName=n3 State=IDLE+DRAIN {TAIL} LastBusyTime=2026-12-02T06:55:02 "
               f"Reason={XID} [root@2026-12-02T06:56:05]")
    assert A.condition(done) == "drained"


def test_flags_read_in_one_order_from_every_source():
    """Issue 35.4 on 24.11/26.05: `scontrol --json` listed n3's state as ['IDLE', 'DRAIN', 'COMPLETING'] where
    `scontrol -o` printed IDLE+COMPLETING+DRAIN (the dev cluster, this issue's run): both read IDLE+COMPLETING+DRAIN.
    Synthetic: the real 24.11 capture with n4's state list replaced by the one 24.11 gave."""
    import json

    from slurmkit.slurm.slurm_json import parse_scontrol_nodes_json

    doc = json.loads((LOCAL / "slurm-24.11" / "scontrol-json-d-show-node-drained.txt").read_text())
    n4 = next(n for n in doc["nodes"] if n["name"] == "n4")
    n4["state"] = ["IDLE", "DRAIN", "COMPLETING"]
    (from_json,) = [r for r in parse_scontrol_nodes_json(json.dumps(doc)) if r.name == "n4"]
    from_text = rec(f"NodeName=n4 State=IDLE+COMPLETING+DRAIN {TAIL} Reason={XID} [root@2026-12-02T06:56:05]")
    assert from_json.state_text == from_text.state_text == "IDLE+COMPLETING+DRAIN"
