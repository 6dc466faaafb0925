"""The `straggler` health check (issue 34): a node judges itself against the other nodes' records of its multi-node
job in the job-efficiency log, in its epilog (the job that just ended) and in the health program (the runs an
epilog could not judge yet); a lag is a warn in the health log with its likely cause, the Nth within the window a
fail that drains it. The records are built from synthetic samples (named so); the logs are real files, written by
the code that writes them on a node (efficiency.record.append, the hooks' run_hook)."""
import json
import time

import pytest

from slurmkit import config, healthlog
from slurmkit.efficiency import record
from slurmkit.efficiency.model import Capture
from slurmkit.efficiency.verdict import Thresholds
from slurmkit.health.runner import run_checks
from slurmkit.hooks.common import run_hook

from clirun import run_cli
from sitesettings import make_settings

BRAKE = 0x80  # clocks_event_reasons.active: HW Power Brake Slowdown


def _settings(tmp_path, **eff):
    eff.setdefault("straggler_epilog_wait", 0)  # the epilog's wait for late peers: its own test
    s = make_settings()
    s.paths.health_log = str(tmp_path / "health") + "/"
    s.paths.state_dir = str(tmp_path / "state")
    s.health.drain = False
    for k, v in eff.items():
        setattr(s.efficiency, k, v)
    return s


def _write(s, node, job, *, nodelist="n[2-3]", start=None, seconds=20.0, clock=1980.0, reasons=0, power=650.0):
    """Append `node`'s record of a run of `job` (synthetic samples: 8 GPUs, 20 samples each) to the log."""
    end = (start if start is not None else time.time() - seconds) + seconds
    cap = Capture(format="slurmkit-sampler", interval=1.0)
    for i in range(8):
        g = cap.gpu(i, index=i)
        g.power_limit = 700.0
        for t in range(20):
            g.add(t=end - seconds + t, util=97.0, mem_used=40000.0, power=power, sm_clock=clock, reasons=reasons)
    head = {"job_id": job, "start": end - seconds, "gpus": list(range(8))}
    rec = record.build(cap, head, Thresholds(), environ={"SLURM_NODELIST": nodelist}, node=node, end=end)
    record.append(record.log_path(s), rec, s.efficiency.log_max_bytes)
    return rec


def _slow(s, node, job, **kw):
    return _write(s, node, job, clock=382.0, reasons=BRAKE, **kw)


def _epilog(s, node, job, nodelist="n[2-3]"):
    """The epilog's straggler verdict for `job` on `node`, through the hooks' run_hook (which logs it)."""
    env = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": str(job), "SLURM_NODELIST": nodelist}  # as slurmd's epilog
    report, action = run_hook("epilog", s, env, checks=["straggler"], job_gpus=None)
    (r,) = report.results
    return r, action


def _health(s, node):
    report, action = run_hook("health", s, {"SLURMD_NODENAME": node}, checks=["straggler"], job_gpus=None)
    (r,) = report.results
    return r, action


def _logged(s, node):
    return [r for r in healthlog.read(s.paths.health_log, node=node) if r["check"] == "straggler"]


def test_synthetic_the_braked_node_warns_with_its_cause_in_its_health_log_and_its_peer_is_ok(tmp_path):
    s = _settings(tmp_path)
    _write(s, "n2", 41)
    _slow(s, "n3", 41)
    r, action = _epilog(s, "n3", 41)
    assert r.status == "warn" and action == "none", r
    assert r.reason.startswith("lagged the other nodes of job 41: SM clock 382 MHz vs 1980 MHz on the job's other")
    assert "likely cause: HW Power Brake Slowdown on GPU 0-7 (100 % of samples)" in r.reason
    (logged,) = _logged(s, "n3")
    assert logged["status"] == "warn" and logged["context"] == "epilog" and logged["job_id"] == 41
    assert logged["evidence"]["stragglers"][0]["cause"].startswith("HW Power Brake Slowdown")
    assert logged["evidence"]["lagged"] == logged["evidence"]["judged"] != ""
    r2, _ = _epilog(s, "n2", 41)
    assert r2.status == "ok" and r2.reason == "kept pace with the other nodes of job 41"


def test_synthetic_the_nth_lag_in_the_window_fails_and_the_count_starts_again_after_it(tmp_path):
    s = _settings(tmp_path, straggler_drain_after=2)
    for job, want in ((51, "warn"), (52, "fail"), (53, "warn")):
        _write(s, "n2", job)
        _slow(s, "n3", job)
        r, action = _epilog(s, "n3", job)
        assert r.status == want, (job, r)
    fail = [x for x in _logged(s, "n3") if x["status"] == "fail"]
    assert fail[0]["reason"].startswith("lagged its jobs' other nodes in 2 jobs in 24h (limit 2); job 52: SM clock")
    assert fail[0]["action"] == "not-drained (health.drain is false)"  # run_hook drains on it where drain is on
    assert fail[0]["evidence"]["lags"] == 2
    assert "(1 in 24h; drained at 2)" in _logged(s, "n3")[-1]["reason"]  # job 53: the count started again
    # drain_after 0 (the default): named every time, never a fail
    s0 = _settings(tmp_path / "zero")
    for job in (61, 62, 63):
        _write(s0, "n2", job)
        _slow(s0, "n3", job)
        assert _epilog(s0, "n3", job)[0].status == "warn"


def test_synthetic_a_peer_later_than_the_epilog_is_judged_by_the_health_program_once(tmp_path):
    s = _settings(tmp_path)
    _slow(s, "n3", 71)
    r, _ = _epilog(s, "n3", 71)
    assert r.status == "skip" and r.reason == "waiting for the other nodes' records of job 71 (n2)"
    _write(s, "n2", 71)  # n2's epilog writes its record afterwards
    r, _ = _health(s, "n3")
    assert r.status == "warn" and "job 71" in r.reason, r
    r, _ = _health(s, "n3")  # judged: not again
    assert r.status == "skip" and r.reason == "no multi-node job of this node left to judge"
    assert [x["status"] for x in _logged(s, "n3")] == ["skip", "warn", "skip"]


def test_synthetic_the_epilog_waits_a_little_for_a_peer_whose_epilog_started_later(tmp_path):
    import threading
    s = _settings(tmp_path, straggler_epilog_wait=5)
    _slow(s, "n3", 75)
    late = threading.Timer(0.6, lambda: _write(s, "n2", 75))  # n2's epilog writes its record 0.6 s later
    late.start()
    t0 = time.monotonic()
    r, _ = _epilog(s, "n3", 75)
    late.join()
    assert r.status == "warn" and "job 75" in r.reason, r
    assert 0.5 < time.monotonic() - t0 < 4
    s.efficiency.straggler_epilog_wait = 0.5  # a peer that never comes: the wait is bounded
    _slow(s, "n3", 76)
    t0 = time.monotonic()
    assert _epilog(s, "n3", 76)[0].reason == "waiting for the other nodes' records of job 76 (n2)"
    assert 0.4 < time.monotonic() - t0 < 3


def test_synthetic_a_peer_that_never_reports_is_said_once_the_wait_is_over(tmp_path):
    s = _settings(tmp_path, straggler_wait_minutes=2)
    _slow(s, "n3", 81, nodelist="n[2-3],n9", start=time.time() - 100)  # ended 80 s ago; n2 and n9 never wrote
    r, _ = _health(s, "n3")
    assert r.status == "skip" and r.reason == "waiting for the other nodes' records of job 81 (n2, n9)"
    s.efficiency.straggler_wait_minutes = 1  # the same run, now past the wait
    r, _ = _health(s, "n3")
    assert r.status == "skip" and r.reason == "not judged: job 81: no record from n2, n9 in 1 min", r
    assert _health(s, "n3")[0].reason == "no multi-node job of this node left to judge"


def test_synthetic_a_requeued_run_is_compared_with_its_own_run_not_the_last_one(tmp_path):
    s = _settings(tmp_path)
    first = time.time() - 3600 + 1000
    _slow(s, "n2", 91, start=first)  # the first run: n2 was the slow one then
    _write(s, "n3", 91, start=first)
    _write(s, "n2", 91)  # the requeued run: both at speed
    _write(s, "n3", 91)
    r, _ = _epilog(s, "n3", 91)
    assert r.status == "ok", r


def test_a_job_on_one_node_reads_nothing_and_elsewhere_the_check_says_who_clears_a_straggler(tmp_path):
    s = _settings(tmp_path)
    s.paths.health_log = str(tmp_path / "no-such-dir" / "health") + "/"
    r, _ = _epilog(s, "n3", 5, nodelist="n3")
    assert r.status == "skip" and r.reason == "job 5 ran on this node alone: no other node to keep pace with"
    assert not (tmp_path / "no-such-dir" / "efficiency").exists()
    (r,) = run_checks(_settings(tmp_path), "full", only=["straggler"], node="n3").results
    assert r.status == "skip" and "`slurmkit audit resume NODE --force`" in r.reason
    s.efficiency.enabled = False
    assert _epilog(s, "n3", 5, nodelist="n[2-3]")[0].reason.startswith("efficiency is off")


def test_a_capture_is_refused_with_exit_2(tmp_path):
    f = tmp_path / "eff.jsonl"
    f.write_text(json.dumps({"job_id": 1}) + "\n")
    rc, out, err = run_cli(["check", "--capture", f"straggler={f}"])
    assert rc == 2 and "straggler reads the job-efficiency log" in err, (out, err)


@pytest.mark.parametrize("key,bad", [("straggler_drain_after", -1), ("straggler_wait_minutes", 0)])
def test_the_settings_are_validated(tmp_path, key, bad):
    p = tmp_path / "s.yaml"
    p.write_text(f"efficiency:\n  {key}: {bad}\n")
    with pytest.raises(Exception) as e:
        config.load(str(p))
    assert key in str(e.value) and "s.yaml" in str(e.value)
