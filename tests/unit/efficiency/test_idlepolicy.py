"""The idle policy (issue 34): the pure decision over a job's GPU samples (idle runs, stages, exemptions), its
settings (sub-minute values, validated ranges, file:line on a bad value), the notice appended as the job's user
without following links, and what `slurmkit report idle` shows of the policy's health-log records. The policy on
a real cluster (the notice, the cancel, the exempt jobs left running): tests/integration/test_idle_policy_cluster.py."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import config, healthlog
from slurmkit.efficiency.idleact import Actor
from slurmkit.efficiency.idlepolicy import (ACTED, EXEMPT, NONE, NOTICED, IdleRuns, action_for, action_reason, decide,
                                            exempt_reason)
from slurmkit.errors import UsageError
from slurmkit.settings import IdlePolicySettings

REPO = Path(__file__).resolve().parents[3]


def policy(**kw) -> IdlePolicySettings:
    return IdlePolicySettings(**{"enabled": True, "notice_after": 3, "action_after": 8, **kw})


def test_a_job_is_idle_for_the_shortest_idle_run_of_its_gpus():
    runs = IdleRuns([0, 1], util_pct=5)
    for t in range(0, 11):
        runs.add(float(t), 0, 0.0)
        runs.add(float(t), 1, 0.0 if t >= 4 else 60.0)   # GPU 1 worked until t=3
    assert runs.idle_seconds() == 6.0
    runs.add(11.0, 0, 5.0)        # at the threshold: still idle
    assert runs.idle_seconds() == 6.0   # GPU 1 has no sample at 11 yet: its run ends at its last sample
    runs.add(11.0, 1, 0.0)
    assert runs.idle_seconds() == 7.0
    runs.add(12.0, 0, None)       # no reading (MIG, [N/A], a failed tool): never idle
    assert runs.idle_seconds() is None
    runs.add(13.0, 0, 0.0)
    runs.add(13.0, 1, 0.0)
    assert runs.idle_seconds() == 0.0   # a new run starts from the next idle sample
    assert IdleRuns([0, 1], 5).idle_seconds() is None    # no samples: not idle
    runs.add(14.0, 7, 0.0)        # a GPU that is not the job's changes nothing
    assert runs.idle_seconds() == 0.0


def test_the_notice_comes_first_then_the_action_and_a_busy_sample_starts_over():
    p = policy()
    assert decide(p, None, NONE) == "none"
    assert decide(p, 2.9, NONE) == "none"
    assert decide(p, 3.0, NONE) == "notice"
    assert decide(p, 5.0, NOTICED) == "none"
    assert decide(p, 8.0, NOTICED) == "act"
    assert decide(p, 9.0, ACTED) == "none"        # once
    assert decide(p, None, NOTICED) == "reset"    # busy again after the notice: a later idle run is noticed anew
    assert decide(p, None, EXEMPT) == "reset"
    assert decide(p, 100.0, EXEMPT) == "none"
    assert decide(p, 20.0, NONE) == "act"         # both due at once: the action (the edge writes the notice too)
    assert decide(policy(action="none"), 1e6, NOTICED) == "none"   # notice only
    assert decide(policy(enabled=False), 1e6, NONE) == "none"      # off by default
    assert IdlePolicySettings().enabled is False


def test_exempt_accounts_partitions_users_and_multi_node_jobs_are_left_alone():
    p = policy(exempt_accounts=["ops"], exempt_partitions=["debug"], exempt_users=["svc"])
    job = {"user": "alice", "account": "ml", "partition": "gpu", "num_nodes": 1}
    assert exempt_reason(p, job) is None
    assert "account ops" in exempt_reason(p, dict(job, account="ops"))
    assert "partition debug" in exempt_reason(p, dict(job, partition="debug"))
    assert "partition debug" in exempt_reason(p, dict(job, partition="gpu,debug"))
    assert "user svc" in exempt_reason(p, dict(job, user="svc"))
    assert "2-node job" in exempt_reason(p, dict(job, num_nodes=2))


def test_requeue_until_the_limit_then_cancel_so_an_idle_job_is_not_requeued_forever():
    p = policy(action="requeue", requeue_limit=1)
    assert action_for(p, {"restarts": 0}) == "requeue"
    assert action_for(p, {"restarts": 1}) == "cancel"
    assert action_for(p, {}) == "cancel"             # Slurm did not say: the action that cannot loop
    assert action_for(policy(), {"restarts": 0}) == "cancel"
    assert action_for(policy(action="none"), {"restarts": 0}) == "none"
    assert action_reason(p, 8.0, "cancel").endswith("for 8 s (requeued 1 time(s) already)")
    assert action_reason(p, 600.0, "requeue") == "slurmkit idle policy: requeued, all GPUs idle (<= 5%) for 10 min"


def test_settings_take_seconds_and_name_the_line_of_a_bad_value(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("idle_policy:\n  enabled: true\n  notice_after: 3\n  action_after: 8.5\n  action: requeue\n"
                   "  exempt_partitions: [debug]\n  notice_command: [/usr/bin/logger, 'idle {job_id}']\n")
    s = config.load(str(cfg)).idle_policy
    assert (s.enabled, s.notice_after, s.action_after, s.action, s.exempt_partitions) == \
        (True, 3, 8.5, "requeue", ["debug"])
    cfg.write_text("idle_policy:\n  enabled: true\n  notice_after: 0\n")
    with pytest.raises(UsageError) as e:
        config.load(str(cfg))
    assert "c.yaml:3" in str(e.value) and "notice_after" in str(e.value)
    cfg.write_text("idle_policy:\n  action: kill\n")
    with pytest.raises(UsageError) as e:
        config.load(str(cfg))
    assert "c.yaml:2" in str(e.value)
    cfg.write_text("idle_policy:\n  notice_after: 600\n  action_after: 60\n")
    with pytest.raises(UsageError, match="notice_after must not be above action_after"):
        config.load(str(cfg))


def _actor(tmp_path) -> Actor:
    cfg = {"policy": {**IdlePolicySettings().__dict__, "enabled": True}, "health_log": str(tmp_path / "health/")}
    return Actor(cfg, 42, "n1", [0])


def _me() -> dict:
    import pwd
    pw = pwd.getpwuid(os.getuid())
    return {"user": pw.pw_name, "uid": pw.pw_uid, "gid": pw.pw_gid}


def test_the_notice_is_appended_to_the_jobs_output_never_through_a_link_nor_to_a_fifo(tmp_path):
    a = _actor(tmp_path)
    out = tmp_path / "slurm-42.out"
    out.write_text("epoch 1\n")
    assert a._append_as_user(dict(_me(), stdout=str(out)), "slurmkit idle policy: x") == f"appended to {out}"
    assert out.read_text() == "epoch 1\nslurmkit idle policy: x\n"
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    link = tmp_path / "link.out"
    link.symlink_to(secret)
    r = a._append_as_user(dict(_me(), stdout=str(link)), "y")
    assert r.startswith("not written") and secret.read_text() == "root's\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "not written" in a._append_as_user(dict(_me(), stdout=str(fifo)), "z")   # and it did not block
    gone = tmp_path / "gone.out"
    assert a._append_as_user(dict(_me(), stdout=str(gone)), "z").startswith("not written") and not gone.exists()
    assert a._append_as_user(dict(_me(), stdout=None), "z").startswith("no output file")
    if os.geteuid() != 0:   # without root it never runs as another user
        assert "without root" in a._append_as_user({"user": "x", "uid": os.getuid() + 1, "gid": 0,
                                                    "stdout": str(out)}, "z")


def test_report_idle_lists_what_the_policy_did(tmp_path):
    log = tmp_path / "efficiency.jsonl"
    now = time.time()
    from slurmkit.efficiency import record
    record.append(str(log), {"job_id": 7, "user": "bob", "account": "ml", "node": "n1", "end": now,
                             "verdict": "idle", "gpu_hours": 1.0, "gpu_hours_by_state": {"idle": 1.0}},
                  max_bytes=1 << 20)
    health = tmp_path / "health/"
    for action in ("noticed", "cancelled"):
        healthlog.append(str(health), healthlog.record(check="idle_policy", status="warn", reason=f"r {action}",
                                                       context="efficiency", node="n1", job_id=7, action=action,
                                                       user="bob", account="ml", partition="gpu",
                                                       evidence={"idle_seconds": 9.0}))
    healthlog.append(str(health), healthlog.record(check="xid", status="ok", node="n1"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"paths:\n  health_log: {health}/\naudit:\n  price_per_gpu_hour: 2\nefficiency:\n  log: {log}\n")
    env = dict(os.environ, SLURMKIT_CONFIG=str(cfg))

    def run(*a):
        return subprocess.run([sys.executable, "-m", "slurmkit.cli", "report", "idle", *a], capture_output=True,
                              text=True, timeout=60, env=env, cwd=str(REPO))
    r = run("--by", "account", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [a["action"] for a in doc["policy_actions"]] == ["noticed", "cancelled"]
    assert doc["policy_actions"][1]["idle_seconds"] == 9.0 and doc["policy_actions"][1]["account"] == "ml"
    (g,) = doc["groups"]
    assert g["account"] == "ml" and g["policy"] == {"noticed": 1, "cancelled": 1} and g["idle_cost"] == 2.0
    text = run("--by", "user").stdout
    assert "idle policy: job 7 (bob, ml, n1): cancelled at" in text


def test_the_reason_goes_after_the_users_own_comment():
    from slurmkit.efficiency.idleact import comment_with
    assert comment_with(None, "slurmkit idle policy: cancelled") == "slurmkit idle policy: cancelled"
    assert comment_with("exp-12", "slurmkit idle policy: cancelled") == "exp-12; slurmkit idle policy: cancelled"


FAKE = REPO / "dev" / "fakegpu"


def _sampler_with_policy(tmp_path, gpus: str, seconds: float) -> list[dict]:
    """The real sampler over the fake nvidia-smi (eff-idle1of4: GPU 3 at 0 %, GPU 0 at 97 %) with the policy on
    (notice after 1 s) and no Slurm to ask (slurm_bin_dir names an empty directory): its health-log records."""
    procroot = tmp_path / "proc"
    (procroot / "4242").mkdir(parents=True)
    (procroot / "4242" / "cmdline").write_bytes(b"slurmstepd: [77.batch]\0")
    (tmp_path / "nobin").mkdir()
    health = tmp_path / "health/"
    cfg = {"policy": {**IdlePolicySettings().__dict__, "enabled": True, "notice_after": 1, "action_after": 2},
           "health_log": str(health), "slurm_bin_dir": str(tmp_path / "nobin")}
    env = dict(os.environ, SLURMKIT_FAKEGPU_SCENARIO=str(FAKE / "scenarios" / "eff-idle1of4"))
    p = subprocess.Popen([sys.executable, "-I", "-m", "slurmkit.efficiency.sampler", "--job", "77", "--gpus", gpus,
                          "--out", str(tmp_path / "77.samples"), "--interval", "0.2",
                          "--tool", str(FAKE / "bin" / "nvidia-smi"), "--backend", "nvidia-smi", "--watchdog", "0.2",
                          "--proc-root", str(procroot), "--idle-policy", json.dumps(cfg), "--node", "n1"],
                         env=env, cwd=str(REPO))
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        p.terminate()
        p.wait(timeout=10)
    return list(healthlog.read(str(health)))


def test_an_idle_job_whose_record_slurm_does_not_give_is_never_acted_on(tmp_path):
    recs = _sampler_with_policy(tmp_path, "3", 4)   # idle well past action_after
    assert len(recs) == 1, recs                      # said once, not every tick
    (r,) = recs
    assert r["check"] == "idle_policy" and r["action"] == "none" and r["job_id"] == 77 and r["node"] == "n1"
    assert "the job record could not be read" in r["reason"], r


def test_a_job_with_one_busy_gpu_is_not_idle(tmp_path):
    assert _sampler_with_policy(tmp_path, "0,3", 3) == []    # GPU 3 idle, GPU 0 busy: nothing to say
