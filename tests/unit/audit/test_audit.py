"""slurmkit audit: causes, ages, evidence, GPU-hours, resume decisions, and the CLI over real captures."""
import csv
import io
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurmkit import audit as A, config, drain, times
from slurmkit.errors import UsageError
from slurmkit.slurm.records import NodeRecord

from clirun import run_cli
from sitesettings import make_settings

FIX = Path(__file__).resolve().parents[2] / "fixtures"
TABLE = A.load_causes()
PREFIX = "slurmkit:"


def local(s):  # Slurm prints reason times in the controller's local time
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").astimezone()


def node(name="n1", state="IDLE", flags=("DRAIN",), reason="", user="root", when="2026-11-30T09:00:00", gpus=8,
         used=0, parts=("gpu",)):
    return NodeRecord(name=name, state=state, flags=list(flags), reason=reason, reason_user=user if reason else None,
                      reason_time=when if reason else None, gres=f"gpu:{gpus}", gpus_total=gpus, gpus_used=used,
                      partitions=list(parts))


@pytest.mark.parametrize("reason,by,cause", [
    ("slurmkit:xid79 GPU 0000:3b:00 fell off the bus", "slurmkit", "xid79-fell-off-bus"),
    ("slurmkit:xid48 double bit ECC on GPU 2", "slurmkit", "xid-ecc-dbe"),
    ("slurmkit:xid13 graphics engine exception", "slurmkit", "xid-other"),
    ("slurmkit:ecc row remapping pending on GPU 1", "slurmkit", "ecc-remap-pending"),
    ("slurmkit:ecc row remapping failure on GPU 1", "slurmkit", "ecc-remap-failure"),
    ("slurmkit:gpu_count 7 of 8 GPUs visible", "slurmkit", "gpu-count"),
    ("slurmkit:brand_new_check something", "slurmkit", "slurmkit-other"),
    ("Prolog error", "slurm", "prolog-error"),
    ("Epilog error", "slurm", "epilog-error"),
    ("Kill task failed", "slurm", "kill-task-failed"),
    ("Duplicate jobid", "slurm", "duplicate-jobid"),      # slurmctld's own drain (strings in its 22.05 binary)
    ("gres/gpu count reported lower than configured (0 < 1)", "slurm", "gres-count-low"),
    ("gres/gpu count repor", "slurm", "gres-count-low"),            # cut at 20 characters by sinfo -R
    ("gres/gpu GRES core s", "slurm", "gres-core-mismatch"),
    ("Not responding", "slurm", "not-responding"),
    ("Low RealMemory", "slurm", "low-memory"),
    ("Node unexpectedly rebooted", "slurm", "unexpected-reboot"),
    ("NHC: check_fs_mount:  /scratch not mounted", "other-checker", "nhc"),
    ("deep power-off required for PSU", "admin", "admin"),
    ("Prolog errors are fun, says bob", "admin", "admin"),   # only the exact Slurm message
    ("not slurmkit:xid79", "admin", "admin"),                      # the prefix must START the reason
    ("", "unknown", "no-reason"),
])
def test_classify(reason, by, cause):
    c, tag = TABLE.classify(reason, PREFIX)
    assert (c.by, c.id) == (by, cause)


def test_site_prefix_from_config():
    c, tag = TABLE.classify("acme-hc:xid79 GPU gone", "acme-hc:")
    assert (c.id, tag) == ("xid79-fell-off-bus", "xid79")
    assert TABLE.classify("acme-hc:xid79 GPU gone", "slurmkit:")[0].by == "admin"


def test_check_of_tag():
    assert [drain.check_of_tag(t) for t in ("xid79", "ecc", "gpu_count", "nccl", None)] == \
        ["xid", "ecc", "gpu_count", "nccl", None]
    # one mapping for audit and the drain etiquette: an NVSwitch SXid drain is the xid check's
    assert drain.check_of_tag("sxid20034") == "xid"
    s = make_settings()
    for reason in ("slurmkit:sxid20034 NVSwitch", "slurmkit:gpu_procs left on the GPU", "slurmkit:xid79 GPU"):
        cause, tag = TABLE.classify(reason, s.drain.prefix)
        assert drain.check_of_tag(tag) == drain.check_of_reason(reason, s)


NOW = local("2026-11-30T12:00:00")


def test_audit_ages_gpus_and_order():
    recs = [node("n1", reason="admin: PSU", when="2026-11-30T11:00:00"),
            node("n2", reason="slurmkit:xid79 GPU 0000:3b:00 fell off the bus", when="2026-11-29T12:00:00"),
            node("n3", state="MIXED", reason="Kill task failed", user="slurm", when="2026-11-30T10:00:00", used=3),
            node("n4", state="DOWN", flags=("NOT_RESPONDING",), reason="Not responding", when="2026-11-30T11:30:00"),
            node("n5", flags=(), reason=""),                     # healthy: not listed
            node("n6", state="MIXED", flags=(), reason=""),      # busy: not listed
            node("n7", state="DOWN", flags=(), reason="")]       # down, no reason (from a default sinfo capture)
    es = A.audit(recs, table=TABLE, prefix=PREFIX, now=NOW)
    got = [(e.node.name, e.by, e.cause.id, A.condition(e.node), e.age_seconds, e.gpus_out) for e in es]
    assert got == [
        ("n2", "slurmkit", "xid79-fell-off-bus", "drained", 86400.0, 8),
        ("n3", "slurm", "kill-task-failed", "draining", 7200.0, 5),   # 3 GPUs still run a job
        ("n1", "admin", "admin", "drained", 3600.0, 8),
        ("n4", "slurm", "not-responding", "down", 1800.0, 8),
        ("n7", "unknown", "no-reason", "down", None, 8),
    ]
    assert es[0].check == "xid" and "reboot" in es[0].next_step
    s = A.summarize(es, price_per_gpu_hour=2.5)
    assert s["nodes"] == 5 and s["gpus_out"] == 37
    assert s["gpu_hours_lost"] == 8 * 24 + 5 * 2 + 8 * 1 + 8 * 0.5       # n7: unknown age, not counted
    assert s["nodes_of_unknown_age"] == 1
    assert s["gpu_hours_per_day"] == 37 * 24
    assert s["cost_so_far"] == pytest.approx(s["gpu_hours_lost"] * 2.5)
    assert s["cost_per_day"] == 37 * 24 * 2.5
    assert s["by_who"] == {"slurmkit": {"nodes": 1, "gpus_out": 8}, "slurm": {"nodes": 2, "gpus_out": 13},
                           "admin": {"nodes": 1, "gpus_out": 8}, "unknown": {"nodes": 1, "gpus_out": 8}}
    assert s["by_cause"]["kill-task-failed"]["nodes"] == 1
    assert "cost_so_far" not in A.summarize(es)                     # no price configured: GPU-hours only


def test_since_and_partition_filters():
    recs = [node("old", reason="admin: x", when="2026-11-01T00:00:00"),
            node("new", reason="admin: y", when="2026-11-30T11:00:00", parts=("cpu",)),
            node("notime", state="IDLE", reason="", flags=("DRAIN",))]
    since = times.parse_since("7d", NOW)
    assert [e.node.name for e in A.audit(recs, table=TABLE, prefix=PREFIX, now=NOW, since=since)] == \
        ["new", "notime"]
    assert [e.node.name for e in A.audit(recs, table=TABLE, prefix=PREFIX, now=NOW, partitions=["gpu"])] == \
        ["old", "notime"]


def test_parse_since():
    assert times.parse_since("12h", NOW) == NOW - timedelta(hours=12)
    assert times.parse_since("2w", NOW) == NOW - timedelta(days=14)
    assert times.parse_since("2026-11-01", NOW) == local("2026-11-01T00:00:00")
    with pytest.raises(UsageError, match="--since"):
        times.parse_since("last tuesday", NOW)


def utc(s):
    return local(s).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


HEALTH = [
    {"time": utc("2026-11-30T09:00:00"), "node": "n2", "context": "prolog", "job_id": 7, "check": "xid",
     "status": "ok", "reason": "", "evidence": {}, "action": "none"},
    {"time": utc("2026-11-30T10:59:58"), "node": "n2", "context": "prolog", "job_id": 8, "check": "xid",
     "status": "fail", "reason": "slurmkit:xid79 GPU 0000:3b:00 fell off the bus",
     "evidence": {"line": "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."}, "action": "drained"},
    {"time": utc("2026-11-30T10:40:00"), "node": "n3", "context": "prolog", "job_id": 9, "check": "ecc",
     "status": "fail", "reason": "slurmkit:ecc row remapping pending on GPU 1", "evidence": {"gpu": 1},
     "action": "skipped-admin-drain"},
    {"time": utc("2026-11-30T08:00:00"), "node": "n4", "context": "prolog", "job_id": 3, "check": "ecc",
     "status": "fail", "reason": "slurmkit:ecc x", "evidence": {}, "action": "drained"},
]


def test_evidence_for_slurmkit_and_prolog_error_drains():
    recs = [node("n2", reason="slurmkit:xid79 GPU 0000:3b:00 fell off the bus", when="2026-11-30T11:00:00"),
            node("n3", reason="Prolog error", user="slurm", when="2026-11-30T10:41:00"),
            node("n4", reason="Prolog error", user="slurm", when="2026-11-30T11:41:00"),
            node("n1", reason="admin: PSU", when="2026-11-30T10:41:00")]
    es = {e.node.name: e for e in A.audit(recs, table=TABLE, prefix=PREFIX, now=NOW,
                                          health=A.index_health_log(HEALTH))}
    assert [r["job_id"] for r in es["n2"].evidence] == [8]
    assert "fallen off the bus" in es["n2"].evidence[0]["evidence"]["line"]
    # a Prolog error with a slurmkit failure a minute before it: the slurmkit prolog failed; say which check
    assert [r["check"] for r in es["n3"].evidence] == ["ecc"]
    assert "slurmkit prolog failed" in es["n3"].next_step
    # a Prolog error with no slurmkit record near it (the one on n4 is 3h41m older): read the slurmd log
    assert es["n4"].evidence == [] and "slurmd log" in es["n4"].next_step
    assert es["n1"].evidence == []


def test_evidence_is_this_drains_failure_not_audit_records_or_an_older_drain():
    reason = "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"
    older = dict(HEALTH[1], time=utc("2026-10-01T08:00:00"), job_id=1)
    resumed = dict(HEALTH[1], time=utc("2026-10-01T09:00:00"), context="audit", status="ok", action="resumed")
    rec = node("n2", reason=reason, when="2026-11-30T11:00:00")
    (e,) = A.audit([rec], table=TABLE, prefix=PREFIX, now=NOW,
                   health=A.index_health_log([older, resumed, HEALTH[1]]))
    assert [r["job_id"] for r in e.evidence] == [8]
    (e,) = A.audit([rec], table=TABLE, prefix=PREFIX, now=NOW, health=A.index_health_log([older, resumed]))
    assert [r["job_id"] for r in e.evidence] == [1]     # only an older drain on record: better than nothing


def test_evidence_matches_a_reason_cut_by_sinfo_R():
    rec = node("n2", reason="slurmkit:xid79 GPU 0", user="root", when="2026-11-30T11:00:00")
    (e,) = A.audit([rec], table=TABLE, prefix=PREFIX, now=NOW, health=A.index_health_log(HEALTH))
    assert [r["job_id"] for r in e.evidence] == [8]


def entry_for(rec, health=()):
    (e,) = A.audit([rec], table=TABLE, prefix=PREFIX, now=NOW, health=A.index_health_log(health))
    return e


def test_plan_resume():
    sk = entry_for(node("n2", reason="slurmkit:xid79 GPU gone", when="2026-11-30T11:00:00"))
    adm = entry_for(node("n1", reason="admin: PSU swap", user="alice", when="2026-11-30T10:00:00"))
    prolog = entry_for(node("n4", reason="Prolog error", user="slurm"))
    d = drain.plan_resume(sk, "n2", force=False, recheck=False, passed_since_drain=False)
    assert d.action == "refuse" and "--recheck" in d.why
    assert drain.plan_resume(sk, "n2", force=False, recheck=False, passed_since_drain=True).action == "resume"
    d = drain.plan_resume(sk, "n2", force=False, recheck=True, passed_since_drain=False)
    assert (d.action, d.check) == ("recheck", "xid")
    d = drain.plan_resume(adm, "n1", force=False, recheck=True, passed_since_drain=False)
    assert d.action == "refuse" and "alice" in d.why and "admin: PSU swap" in d.why
    d = drain.plan_resume(adm, "n1", force=True, recheck=False, passed_since_drain=False)
    assert d.action == "resume" and "overriding" in d.why and "alice" in d.why
    assert d.overrides == {"by": "admin", "user": "alice", "reason": "admin: PSU swap", "time": "2026-11-30T10:00:00"}
    d = drain.plan_resume(prolog, "n4", force=False, recheck=False, passed_since_drain=False)
    assert d.action == "refuse" and "Slurm itself" in d.why and "Prolog error" in d.why
    assert drain.plan_resume(None, "n5", force=True, recheck=True, passed_since_drain=False).action == "skip"


def test_passed_since():
    drained = local("2026-11-30T11:00:00")
    ok_after = {"time": utc("2026-11-30T11:30:00"), "node": "n2", "check": "xid", "status": "ok", "context": "check"}
    ok_before = dict(ok_after, time=utc("2026-11-30T10:30:00"))
    other = dict(ok_after, check="ecc")
    # an epilog after the drain says "no new Xid events": the old Xid is simply not new; not a pass
    epilog = dict(ok_after, context="epilog", reason="no new Xid events")
    partial = dict(ok_after, evidence={"new_events": 0, "events_in_log": 2})
    assert A.passed_since([ok_after], "xid", drained)
    assert not A.passed_since([ok_before, other, epilog, partial], "xid", drained)


def test_recheck_argv_is_a_list_with_placeholders_filled():
    argv = A.recheck_argv(["ssh", "-o", "BatchMode=yes", "{node}", "slurmkit", "check", "--only", "{check}"],
                          "n3; rm -rf /", "xid")
    assert argv == ["ssh", "-o", "BatchMode=yes", "n3; rm -rf /", "slurmkit", "check", "--only", "xid"]
    with pytest.raises(UsageError):
        A.recheck_argv([], "n3", "xid")


def test_the_default_recheck_runs_what_install_put_on_the_node(tmp_path):
    from slurmkit import config
    from slurmkit.audit.resume import installed as _installed
    ssh_cfg = tmp_path / "ssh_config"
    ssh_cfg.write_text("Host *\n")
    s = config.loads(f"install:\n  root: /srv/{{node}}\n  ssh_config: {ssh_cfg}\n  known_hosts: /kh\n")
    argv = A.recheck_argv(s.audit.recheck_command, "n3", "xid", _installed(s, "n3"))
    assert argv == ["ssh", "-F", str(ssh_cfg), "-o", "UserKnownHostsFile=/kh", "-o", "BatchMode=yes",
                    "-o", "ConnectTimeout=10", "n3", "/srv/n3/opt/slurmkit/venv/bin/slurmkit",
                    "--config", "/srv/n3/etc/slurmkit/config.yaml", "check", "--json", "--node", "n3",
                    "--only", "xid"]
    # the defaults: /opt/slurmkit/venv, no ssh config file -> -F /dev/null (ssh refuses a missing -F file)
    d = config.loads(f"install:\n  ssh_config: {tmp_path / 'none'}\n")
    argv = A.recheck_argv(d.audit.recheck_command, "n1", "ecc", _installed(d, "n1"))
    assert argv[1:3] == ["-F", "/dev/null"] and "/opt/slurmkit/venv/bin/slurmkit" in argv
    # placeholders inside longer arguments
    assert A.recheck_argv(["--x={node}.{check}"], "n1", "ecc") == ["--x=n1.ecc"]


def test_recheck_verdict():
    ok = json.dumps({"node": "n3", "healthy": True, "results": [{"check": "xid", "status": "ok", "reason": ""}]})
    bad = json.dumps({"node": "n3", "healthy": False, "results": [
        {"check": "xid", "status": "fail", "reason": "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"}]})
    other = json.dumps({"node": "n3", "healthy": True, "results": [{"check": "ecc", "status": "ok"}]})
    assert A.recheck_verdict(ok, 0, "xid")[0] is True
    passed, why = A.recheck_verdict(bad, 1, "xid")
    assert not passed and "fell off the bus" in why
    assert A.recheck_verdict(other, 0, "xid")[0] is False
    assert A.recheck_verdict("Error: No such command 'check'.", 2, "xid")[0] is False
    skipped = json.dumps({"healthy": True, "results": [{"check": "xid", "status": "skip"}]})
    assert A.recheck_verdict(skipped, 0, "xid")[0] is False
    # the xid check as issue 3 wrote it: live, it counts only events after the prolog's mark. "no new Xid events"
    # with the Xid 79 still in the log is not a pass; after a reboot (every event new) a clean log is.
    not_new = json.dumps({"healthy": True, "results": [{"check": "xid", "status": "ok", "reason": "no new Xid events",
                                                        "evidence": {"new_events": 0, "events_in_log": 2}}]})
    passed, why = A.recheck_verdict(not_new, 0, "xid")
    assert not passed and "still in the log" in why
    clean = json.dumps({"healthy": True, "results": [{"check": "xid", "status": "ok", "reason": "no new Xid events",
                                                      "evidence": {"new_events": 0, "events_in_log": 0}}]})
    assert A.recheck_verdict(clean, 0, "xid")[0] is True


def test_cause_table_errors(tmp_path):
    p = tmp_path / "causes.yaml"
    p.write_text("slurmkit:\n  - id: x\n    tag: '(['\n    next: y\nadmin: {id: a, next: b}\nunknown: {id: u, next: v}\n")
    with pytest.raises(UsageError, match="bad regex"):
        A.load_causes(p)
    p.write_text("slurmkit: [\n")
    with pytest.raises(UsageError) as e:
        A.load_causes(p)
    assert e.value.line is not None


# --- the command, as a user runs it ---------------------------------------------------------------------------

def sk(*args, config=None, tmp_path=None, input=None):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(config or f"paths:\n  health_log: {tmp_path}/health.jsonl\n")
    return subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", str(cfg), "audit", *args],
                          capture_output=True, text=True, timeout=60, input=input)


def test_cli_from_file_json(tmp_path):
    f = FIX / "slurm" / "rtx6000ada-8gpu-scontrol-show-node-down-not-responding.txt"
    cfg = f"paths:\n  health_log: {tmp_path}/h.jsonl\naudit:\n  price_per_gpu_hour: 2.0\n"
    r = sk("--json", "--from-file", str(f), "--now", "2026-06-12T16:16:23", config=cfg, tmp_path=tmp_path)
    assert r.returncode == 1, r.stderr                      # a node is out of service
    out = json.loads(r.stdout)
    (n,) = out["nodes"]
    assert (n["node"], n["by"], n["cause"], n["condition"], n["age_seconds"], n["gpus_out"]) == \
        ("rtx6000-ada", "slurm", "not-responding", "down", 86400, 8)
    assert n["reason_user"] == "root" and "slurmd" in n["next_step"]
    assert out["summary"]["gpu_hours_lost"] == 192 and out["summary"]["cost_per_day"] == 8 * 24 * 2.0


def test_cli_from_file_csv_and_human(tmp_path):
    f = FIX / "slurm" / "unige-baobab-sinfo-R-gres-gpu-reasons-truncated.txt"
    r = sk("--csv", "--from-file", str(f), "--now", "2025-04-04T00:00:00", tmp_path=tmp_path)
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 49 and rows[0].keys() >= {"node", "by", "cause", "reason_user", "next_step"}
    causes = {}
    for x in rows:
        causes[x["cause"]] = causes.get(x["cause"], 0) + 1
    assert causes == {"gres-core-mismatch": 44, "gres-count-low": 2, "admin": 3}
    assert {x["by"] for x in rows if x["cause"] == "admin"} == {"admin"}
    r = sk("--from-file", str(f), "--now", "2025-04-04T00:00:00", tmp_path=tmp_path)
    assert "49 nodes out of service (admin 3, slurm 46)" in r.stdout
    assert "gres-core-mismatch 44" in r.stdout


def test_cli_healthy_capture_exits_0(tmp_path):
    r = sk("--from-file", str(FIX / "slurm" / "a40-4gpu-scontrol-show-node-idle-slurm24-cn20.txt"),
           tmp_path=tmp_path)
    assert r.returncode == 0 and "no node out of service" in r.stdout


def test_cli_bad_input_exits_2_with_file_and_line(tmp_path):
    f = FIX / "slurm" / "gengwg-scontrol-update-invalid-node-state.txt"
    r = sk("--from-file", str(f), tmp_path=tmp_path)
    assert r.returncode == 2 and f"{f}:1: this is a Slurm error message" in r.stderr
    assert "Traceback" not in r.stderr
    r = sk("--since", "yesterday-ish", "--from-file", str(f), tmp_path=tmp_path)
    assert r.returncode == 2 and "--since" in r.stderr
    r = sk("--from-file", str(tmp_path / "nope.txt"), tmp_path=tmp_path)
    assert r.returncode == 2 and "nope.txt" in r.stderr
    r = sk("--from-file", str(f), config="audit:\n  price_per_gpu_hour: cheap\n", tmp_path=tmp_path)
    assert r.returncode == 2 and "cfg.yaml:2" in r.stderr and "audit.price_per_gpu_hour" in r.stderr


def test_cli_evidence_from_the_health_log(tmp_path):
    """synthetic capture (scontrol -o layout) + health log, as the dev cluster writes them"""
    capture = ("NodeName=n3 CPUTot=16 Gres=gpu:8 State=IDLE+DRAIN Partitions=gpu "
               "Reason=slurmkit:xid79 GPU 0000:3b:00 fell off the bus [root@2026-11-30T11:00:00]\n")
    rec = dict(HEALTH[1], node="n3")
    (tmp_path / "health.jsonl").write_text(json.dumps(rec) + "\n" + "{torn line\n")
    r = sk("--json", "--from-file", "-", "--now", "2026-11-30T12:00:00", tmp_path=tmp_path, input=capture)
    (n,) = json.loads(r.stdout)["nodes"]
    assert n["check"] == "xid" and n["evidence"][0]["evidence"]["line"].startswith("NVRM: Xid")
    r = sk("--from-file", "-", "--now", "2026-11-30T12:00:00", tmp_path=tmp_path, input=capture)
    assert "NVRM: Xid (PCI:0000:3b:00): 79" in r.stdout and "1h00m" in r.stdout


def test_a_hung_tool_is_its_own_cause_not_fewer_gpus():
    # the drain reason health/runner.py writes when nvidia-smi does not answer (its text, as that code forms it)
    reason = "slurmkit:gpu_count nvidia-smi -q timed out after 10s (hung nvidia-smi: GPU gone?)"
    c, tag = TABLE.classify(reason, PREFIX)
    assert (c.id, tag) == ("tool-hung", "gpu_count") and "fewer" not in c.title
    assert TABLE.classify("slurmkit:gpu_count 7 of 8 GPUs visible", PREFIX)[0].id == "gpu-count"


# --- Issue 17 (H1/U4/U5): hostile audit captures, folded from test_hardening_health.py -------------------------------

def test_h1_audit_capture_with_a_huge_range_is_refused_with_its_line(tmp_path):
    p = tmp_path / "sinfo-R.txt"
    p.write_text("REASON               USER      TIMESTAMP           NODELIST\n"
                 "Kill task failed     root      2023-04-11T11:42:06 n[1-99999999]\n")
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", "/dev/null", "audit", "--from-file",
                        str(p)], capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[3])
    assert r.returncode == 2 and f"{p}:2: hostlist 'n[1-99999999]'" in r.stderr and "100000" in r.stderr


def test_u4_bad_hostlist_in_an_audit_capture_names_file_and_line(tmp_path):
    p = tmp_path / "sinfo-R.txt"
    p.write_text("REASON               USER      TIMESTAMP           NODELIST\n"
                 "Kill task failed     root      2023-04-11T11:42:06 node102\n"
                 "Kill task failed     root      2023-04-11T11:42:06 n[1-x]\n")
    code, out, err = run_cli(["--config", "/dev/null", "audit", "--from-file", str(p)])
    assert code == 2 and f"{p}:3: bad hostlist" in err


def test_u5_terminal_escapes_in_reasons_are_printed_escaped(tmp_path):
    p = tmp_path / "sinfo-R.txt"
    p.write_text("REASON               USER      TIMESTAMP           NODELIST\n"
                 "\x1b[31mevil\x1b]0;x\x07     root      2023-04-11T11:42:06 n1\n")
    for fmt in ([], ["--csv"]):
        code, out, err = run_cli(["--config", "/dev/null", "audit", *fmt, "--from-file", str(p)])
        assert code == 1 and "\x1b" not in out and "\x07" not in out
        assert "\\x1b[31mevil" in out
