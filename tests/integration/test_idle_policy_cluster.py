"""The idle policy (issue 34) on the real dev cluster: three jobs of a real user on nodes running NVIDIA's real
nvidia-smi 535 over the mock NVML (scenario nvml-h100) with every GPU's utilisation pinned at 0 %. With the policy
on in the site config (notice after 3 s, cancel after 8 s; account `ops` and partition `debug` exempt):

- the plain job is noticed (a line in its own output file, written as its user; the site's notice command ran),
  then cancelled, with the reason in its Slurm Comment;
- the job of the exempt account and the job of the exempt partition are left running past the cancel time;
- every step is a record in the health log and shows in `slurmkit report idle`.

With `action: requeue` the idle job is requeued once (requeue_limit 1), and cancelled when it comes back idle."""
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER = "skg-idle"
IDLE, OPS, DEBUG = "n2", "n3", "n4"
NOTICE_AFTER, ACTION_AFTER = 3, 8

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user (sbatch --uid), as root")


def nvml(c, node, *args):
    r = c.run(sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(c.dir), "nvml", node, *args,
              check=False, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def ensure_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def policy_lines(c, action="cancel") -> str:
    return (f"idle_policy:                  # written by test_idle_policy_cluster.py\n"
            f"  enabled: true\n  util_pct: 5\n  notice_after: {NOTICE_AFTER}\n  action_after: {ACTION_AFTER}\n"
            f"  action: {action}\n  requeue_limit: 1\n  exempt_accounts: [ops]\n  exempt_partitions: [debug]\n"
            f"  notice_command: [touch, '{c.dir}/idle-out/notice-{{job_id}}-{{user}}-{{account}}']\n")


@pytest.fixture
def policy_on(clean):
    yield from _policy_on(clean, "cancel")


@pytest.fixture
def requeue_policy_on(clean):
    yield from _policy_on(clean, "requeue")


def _policy_on(c, action):
    """The policy in the cluster's site config (the next prolog passes it to the job's sampler), a `debug`
    partition on n4, the idle nodes on the mock NVML; all undone afterwards."""
    sys.path.insert(0, str(REPO / "dev"))
    import fakenvml
    missing = fakenvml.ready(c.dir)
    if missing:
        pytest.fail(f"the mock NVML rig is not set up: {missing}")
    conf = c.site_config
    original = conf.read_text()
    tmp = conf.with_name(".slurmkit.yaml.idle")
    tmp.write_text(original.rstrip("\n") + "\n" + policy_lines(c, action))
    os.replace(tmp, conf)
    c.run("scontrol", "create", f"PartitionName=debug", f"Nodes={DEBUG}", "State=UP", "MaxTime=INFINITE",
          check=False)
    for n in (IDLE, OPS, DEBUG):
        c.set_scenario(n, "nvml-h100")
        nvml(c, n, "util", "--gpu", "all", "0")
    try:
        yield c
    finally:
        tmp.write_text(original)
        os.replace(tmp, conf)
        c.run("scancel", "--full", "-p", "debug", check=False)
        c.run("scancel", "--full", "-p", "gpu", check=False)
        deadline = time.monotonic() + 60
        while c.run("squeue", "-h", "-p", "debug", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
        c.run("scontrol", "delete", "PartitionName=debug", check=False)


def policy_records(c, job_id):
    from slurmkit import config, healthlog
    log = config.load(str(c.site_config)).paths.health_log
    return [r for r in healthlog.read(log) if r.get("check") == "idle_policy" and r.get("job_id") == job_id]


def wait_for(what, fn, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            assert got, f"{what}: not within {timeout} s"
            return got
        time.sleep(0.5)


def out_dir(c) -> Path:
    outdir = c.dir / "idle-out"
    outdir.mkdir(exist_ok=True)
    outdir.chmod(0o1777)
    for f in outdir.iterdir():
        f.unlink()
    return outdir


def submitter(c, outdir):
    user = ensure_user(USER)

    def submit(*args):
        r = c.run("sbatch", "--parsable", f"--uid={USER}", f"--gid={user.pw_gid}", "--gres=gpu:2",
                  "-o", f"{outdir}/%j.out", "-D", "/tmp", *args, "--wrap", "echo started; sleep 300")
        return int(r.stdout.strip().split(";")[0])
    return user, submit


def test_an_idle_job_is_noticed_then_cancelled_and_exempt_jobs_keep_running(policy_on):
    c = policy_on
    outdir = out_dir(c)
    user, submit = submitter(c, outdir)

    idle = submit("-p", "gpu", "-w", IDLE, "--account=ml", "--comment=keep-me")
    ops = submit("-p", "gpu", "-w", OPS, "--account=ops")
    debug = submit("-p", "debug", "-w", DEBUG, "--account=ml")
    for j in (idle, ops, debug):
        c.wait_job(j, states=("RUNNING",), timeout=60)
    started = time.monotonic()

    # noticed, then cancelled, with the reason in Slurm's record of the job
    c.wait_job(idle, states=("CANCELLED",), timeout=90)
    rec = c.backend.job(idle)
    # after the user's own comment, never over it
    assert rec.raw.get("Comment", "").startswith("keep-me; slurmkit idle policy: cancelled, all GPUs idle"), rec.raw
    recs = wait_for("the cancel's health-log record",
                    lambda: [r for r in policy_records(c, idle) if r["action"] == "cancelled"] and policy_records(c, idle))
    assert [r["action"] for r in recs] == ["noticed", "cancelled"], recs
    noticed, cancelled = recs
    assert noticed["node"] == IDLE and noticed["context"] == "efficiency" and noticed["user"] == USER
    assert noticed["account"] == "ml" and noticed["partition"] == "gpu"
    assert NOTICE_AFTER <= noticed["evidence"]["idle_seconds"] < ACTION_AFTER
    assert cancelled["evidence"]["idle_seconds"] >= ACTION_AFTER and cancelled["evidence"]["comment"] == "set"
    # the notice, in the job's own output file, written as the job's user (the file stays the user's)
    out = outdir / f"{idle}.out"
    text = out.read_text()
    assert f"slurmkit idle policy: job {idle}: GPU(s) 0,1 on {IDLE} have been idle" in text, text
    assert "the job will be cancelled once they have been idle for 8 s" in text, text
    assert os.stat(out).st_uid == user.pw_uid
    assert noticed["evidence"]["job_output"] == f"appended to {out}"
    # the site's notice command ran, its placeholders filled in
    assert (outdir / f"notice-{idle}-{USER}-ml").exists(), sorted(os.listdir(outdir))

    # the exempt jobs: idle as long, left running past the cancel time, each said once in the health log
    while time.monotonic() - started < ACTION_AFTER + 3:
        time.sleep(0.5)
    for j, why in ((ops, "account ops is exempt"), (debug, "partition debug is exempt")):
        assert c.job_state(j) == "RUNNING", (j, c.backend.job(j).raw)
        recs = policy_records(c, j)
        assert [r["action"] for r in recs] == ["exempt"], recs
        assert why in recs[0]["reason"], recs[0]
        assert "slurmkit idle policy" not in (outdir / f"{j}.out").read_text()

    # `slurmkit report idle` shows what the policy did (the cancelled job's epilog wrote its record)
    r = wait_for("report idle with the cancel",
                 lambda: (lambda r: r if r.returncode == 0 and '"cancelled"' in r.stdout else None)(
                     c.slurmkit("report", "idle", "--by", "account", "--since", "1h", "--json")))
    doc = json.loads(r.stdout)
    mine = [a for a in doc["policy_actions"] if a["job_id"] in (idle, ops, debug)]
    assert {(a["job_id"], a["action"]) for a in mine} == \
        {(idle, "noticed"), (idle, "cancelled"), (ops, "exempt"), (debug, "exempt")}, mine
    text = c.slurmkit("report", "idle", "--since", "1h").stdout
    assert f"idle policy: job {idle} ({USER}, ml, {IDLE}): cancelled at" in text, text


def test_requeue_brings_an_idle_job_back_once_and_cancels_it_when_it_comes_back_idle(requeue_policy_on):
    c = requeue_policy_on
    outdir = out_dir(c)
    _, submit = submitter(c, outdir)
    job = submit("-p", "gpu", "-w", IDLE, "--account=ml", "--requeue")
    c.wait_job(job, states=("RUNNING",), timeout=60)
    # requeued: Slurm restarts it (its begin time pushed to now, as `slurmkit run` does, not Slurm's hold-back)
    rec = c.wait_job(job, states=("PENDING",), timeout=90)
    assert rec.restarts == 1, rec
    assert c.backend.job(job).raw.get("Comment", "").startswith("slurmkit idle policy: requeued, all GPUs idle")
    c.run("scontrol", "update", f"JobId={job}", "StartTime=now+2", check=False)
    # back, idle again: requeued once already, so this time it is cancelled
    c.wait_job(job, states=("CANCELLED",), timeout=120)
    assert c.backend.job(job).raw.get("Comment", "").endswith("(requeued 1 time(s) already)")
    recs = wait_for("the cancel's record", lambda: (lambda r: r if r and r[-1]["action"] == "cancelled" else None)(
        policy_records(c, job)))
    assert [r["action"] for r in recs] == ["noticed", "requeued", "noticed", "cancelled"], recs
    assert "will be requeued" in recs[0]["reason"] and "will be cancelled" in recs[2]["reason"]
