"""slurmkit audit on the real dev cluster: drains by slurmkit (a faulty fixture), by an admin and by a failing plain
prolog are each classified with their age; `audit resume` resumes only slurmkit's drain, and only once the node's
check passes again."""
import json
import time

import pytest

from slurmkit import healthlog

ADMIN_REASON = "admin: PSU swap ticket 4411"
JOB = "#!/bin/sh\nsleep 1\n"


def audit_json(c, *args, config=None):
    r = c.slurmkit(*(["--config", str(config)] if config else []), "audit", "--json", *args)
    doc = json.loads(r.stdout)
    # what an admin's script sees: exit 1 exactly when some node is out (drained/down), 0 when none is
    assert r.returncode == (1 if doc["nodes"] else 0), (r.returncode, r.stderr)
    return {n["node"]: n for n in doc["nodes"]}, doc["summary"]


def own_health_log(c, tmp_path):
    """The site config with a health log of this test's own: the shared one holds what earlier tests wrote
    (a slurmkit failure on n4 from another test would read as this drain's evidence)."""
    import yaml
    cfg = yaml.safe_load(c.site_config.read_text()) or {}
    cfg.setdefault("paths", {})["health_log"] = str(tmp_path / "health.jsonl")
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def still(c, name, reason):
    rec = c.node(name)
    return rec.drained and rec.reason == reason


@pytest.fixture
def failing_prolog_n4(clean):
    """n4's prolog is a plain script that exits 1 without draining: Slurm drains the node with "Prolog error"."""
    hook = clean.dir / "hooks" / "prolog.n4"
    hook.write_text("#!/bin/sh\necho 'site prolog: /scratch not mounted' >&2\nexit 1\n")
    hook.chmod(0o755)
    yield clean
    hook.unlink(missing_ok=True)


@pytest.mark.compat("audit")
def test_admin_and_prolog_error_drains_are_classified_and_not_resumed(failing_prolog_n4, tmp_path):
    c = failing_prolog_n4
    cfg = own_health_log(c, tmp_path)
    t0 = time.time()
    c.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={ADMIN_REASON}")
    c.sbatch(JOB, "-w", "n4")
    c.wait_node("n4", lambda r: r.drained and r.reason == "Prolog error", timeout=60)
    nodes, summary = audit_json(c, config=cfg)
    assert sorted(nodes) == ["n2", "n4"]
    n2, n4 = nodes["n2"], nodes["n4"]
    assert (n2["by"], n2["cause"], n2["condition"], n2["reason"], n2["gpus_out"]) == \
        ("admin", "admin", "drained", ADMIN_REASON, 8)
    assert (n4["by"], n4["cause"], n4["reason"]) == ("slurm", "prolog-error", "Prolog error")
    assert n4["evidence"] == [] and "slurmd log" in n4["next_step"]   # no slurmkit record: the site prolog failed
    took = time.time() - t0
    for n in (n2, n4):   # ages measured from Slurm's own reason time (whole seconds)
        assert 0 <= n["age_seconds"] <= took + 2, n
    assert summary["by_who"] == {"admin": {"nodes": 1, "gpus_out": 8}, "slurm": {"nodes": 1, "gpus_out": 8}}
    assert summary["gpus_out"] == 16 and summary["cost_per_day"] == 16 * 24 * 2.5

    # the partition filter and the human table
    assert audit_json(c, "--partition", "nope")[0] == {}
    r = c.slurmkit("audit")
    assert r.returncode == 1 and "prolog-error" in r.stdout and ADMIN_REASON in r.stdout

    # neither is slurmkit's: resume refuses both, says whose reason it is, and changes nothing
    r = c.slurmkit("audit", "resume", "n[2,4]", "--recheck")
    assert r.returncode == 1
    assert "n2: refuse: not drained by slurmkit but by an admin (root)" in r.stdout and ADMIN_REASON in r.stdout
    assert "n4: refuse: not drained by slurmkit but by Slurm itself" in r.stdout
    r = c.slurmkit("audit", "resume", "n4", "--force", "--dry-run")
    assert r.returncode == 0 and "would-resume" in r.stdout and "overriding" in r.stdout
    assert still(c, "n2", ADMIN_REASON) and still(c, "n4", "Prolog error")

    # --force overrides, and says whose reason it overrode
    (c.dir / "hooks" / "prolog.n4").unlink()
    r = c.slurmkit("audit", "resume", "n4", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "n4: resumed: --force: overriding the reason of Slurm itself (root): 'Prolog error'" in r.stdout
    c.wait_node("n4", lambda r: not r.drained)
    assert still(c, "n2", ADMIN_REASON)


@pytest.mark.compat("audit")
def test_resume_trusts_a_later_pass_in_the_health_log(clean):
    """A slurmkit drain with no pass since: refused. Once the health log has a later ok for its check (as the
    check writes when it runs on the node), resume goes ahead without --recheck."""
    c = clean
    reason = "slurmkit:ecc row remapping pending on GPU 1"
    c.run("scontrol", "update", "NodeName=n1", "State=DRAIN", f"Reason={reason}")
    c.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={ADMIN_REASON}")
    from slurmkit import config
    log = config.load(str(c.site_config)).paths.health_log
    healthlog.append(log, healthlog.record(check="ecc", status="fail", reason=reason, node="n1",
                                           context="check", action="drained",
                                           evidence={"remapped_rows_pending": 1, "gpu": 1}))
    nodes, _ = audit_json(c)
    assert (nodes["n1"]["by"], nodes["n1"]["cause"], nodes["n1"]["check"]) == ("slurmkit", "ecc-remap-pending", "ecc")
    assert nodes["n1"]["evidence"][0]["evidence"] == {"remapped_rows_pending": 1, "gpu": 1}
    r = c.slurmkit("audit", "resume", "n[1-2]")
    assert r.returncode == 1 and "n1: refuse: check ecc has not passed" in r.stdout
    assert still(c, "n1", reason)
    time.sleep(1.1)   # the pass must be later than the drain (whole seconds)
    healthlog.append(log, healthlog.record(check="ecc", status="ok", node="n1", context="check"))
    r = c.slurmkit("audit", "resume", "n[1-2]")
    assert r.returncode == 1   # n2 is still refused
    assert "n1: resumed: check ecc has passed since the drain" in r.stdout
    c.wait_node("n1", lambda r: not r.drained)
    assert still(c, "n2", ADMIN_REASON)
    resumed = [x for x in healthlog.read(log, node="n1") if x.get("action") == "resumed"]
    assert resumed and resumed[-1]["context"] == "audit"


@pytest.mark.compat("audit")
def test_slurmkit_drain_from_a_faulty_node_resumes_only_when_healthy_again(clean):
    """Issue 3's prolog drains n3 replaying an Xid 79 capture; audit shows it with the health log's evidence;
    `audit resume --recheck` runs the xid check on n3 and resumes it only once n3 replays a healthy capture."""
    c = clean
    c.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={ADMIN_REASON}")
    # the prolog counts only Xid events it has not seen (a mark per node under paths.state_dir): forget what an
    # earlier run on this cluster saw, so n3's Xid 79 is new to it
    from slurmkit import config
    state_dir = config.load(str(c.site_config)).paths.state_dir
    for f in (c.dir / state_dir).glob("xid-n3*"):
        f.unlink()
    c.set_scenario("n3", "xid79")
    t0 = time.time()
    c.sbatch(JOB, "-w", "n3")
    rec = c.wait_node("n3", lambda r: r.drained and r.reason.startswith("slurmkit:xid79"), timeout=60)
    nodes, summary = audit_json(c)
    n3 = nodes["n3"]
    assert (n3["by"], n3["cause"], n3["check"], n3["reason"]) == \
        ("slurmkit", "xid79-fell-off-bus", "xid", rec.reason)
    assert 0 <= n3["age_seconds"] <= time.time() - t0 + 2
    assert n3["evidence"] and n3["evidence"][0]["node"] == "n3" and n3["evidence"][0]["status"] == "fail"
    assert "reboot" in n3["next_step"]
    assert nodes["n2"]["by"] == "admin" and summary["by_who"]["slurmkit"] == {"nodes": 1, "gpus_out": 8}

    # still faulty: the recheck fails, nothing is resumed
    r = c.slurmkit("audit", "resume", "n[2-3]", "--recheck")
    assert r.returncode == 1, r.stdout
    assert "n3: refuse:" in r.stdout and "n2: refuse:" in r.stdout
    # the live xid check counts only events after the prolog's mark, so it says "no new Xid events" here: audit
    # must not take that for a pass while the Xid 79 is still in the kernel log
    assert "still in the log" in r.stdout or "fell off the bus" in r.stdout, r.stdout
    assert still(c, "n3", rec.reason) and still(c, "n2", ADMIN_REASON)

    # healthy again: --dry-run rechecks but changes nothing; then n3 (only) is resumed
    c.set_scenario("n3", "healthy-h100x8")
    r = c.slurmkit("audit", "resume", "n3", "--recheck", "--dry-run")
    assert r.returncode == 0 and "n3: would-resume: check xid passed" in r.stdout, r.stdout + r.stderr
    assert still(c, "n3", rec.reason)
    r = c.slurmkit("audit", "resume", "n[2-3]", "--recheck")
    assert "n3: resumed: check xid passed" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 1   # n2 refused
    c.wait_node("n3", lambda r: not r.drained)
    assert still(c, "n2", ADMIN_REASON)


@pytest.mark.compat("audit")
def test_evidence_fetched_from_the_node_when_the_shared_log_has_none(clean, tmp_path):
    """audit.node_log_command: the shared log knows nothing of n1's drain; the node's own log does."""
    c = clean
    reason = "slurmkit:gpu_count 7 of 8 GPUs visible"
    c.run("scontrol", "update", "NodeName=n1", "State=DRAIN", f"Reason={reason}")
    node_log = tmp_path / "node-n1.jsonl"
    healthlog.append(str(node_log), healthlog.record(check="gpu_count", status="fail", reason=reason, node="n1",
                                                     context="prolog", action="drained",
                                                     evidence={"visible": 7, "expected": 8}))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"paths:\n  health_log: {tmp_path}/empty-shared.jsonl\n"
                   f"audit:\n  node_log_command: [\"cat\", \"{tmp_path}/node-{{node}}.jsonl\"]\n")
    r = c.slurmkit("--config", str(cfg), "audit", "--json")
    (n1,) = [n for n in json.loads(r.stdout)["nodes"] if n["node"] == "n1"]
    assert (n1["cause"], n1["check"]) == ("gpu-count", "gpu_count")
    assert n1["evidence"][0]["evidence"] == {"visible": 7, "expected": 8}
    cfg.write_text(f"paths:\n  health_log: {tmp_path}/empty-shared.jsonl\n")     # no node log command: no evidence
    r = c.slurmkit("--config", str(cfg), "audit", "--json")
    (n1,) = [n for n in json.loads(r.stdout)["nodes"] if n["node"] == "n1"]
    assert n1["evidence"] == []
