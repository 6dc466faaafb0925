"""The checkpoint sync on the real dev cluster, run by the real epilog (slurmd runs it as root after the job):

- a job (as an ordinary user) writes three checkpoints and is cancelled while writing a fourth: the destination
  holds exactly the three complete ones, verified, owned by the user;
- a job on a node that logs an Xid 79 during the job: the node is drained with its slurmkit reason, and the job's
  checkpoints are synced all the same (the sync runs before the verdict)."""
import os
import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint import sync as cs

REPO = Path(__file__).resolve().parents[2]
USER = "skg-alice"

JOB = """#!/bin/sh
#SBATCH -J train-sync
#SBATCH -o /dev/null
exec /usr/bin/python3 - <<'PYEOF'
import os, sys, time
sys.path.insert(0, {repo!r})
from slurmkit.checkpoint import manifest as mf   # standard library only: fine under the system python
root = "{local}/%s/%s/ckpt" % (os.environ["SLURM_JOB_USER"], os.environ["SLURM_JOB_ID"])
os.makedirs(root, exist_ok=True)
for step in (100, 200, 300, 400):
    d = os.path.join(root, "step-%010d" % step)
    os.makedirs(os.path.join(d, "model"))
    for i in range(3):
        with open(os.path.join(d, "model", "shard-%d.bin" % i), "wb") as f:
            f.write(os.urandom(2 << 20))
            f.flush(); os.fsync(f.fileno())
    if step == 400:  # the fourth: half written when the job is cancelled
        open(os.path.join(root, ".writing-400"), "w").close()
        time.sleep(600)
    with open(os.path.join(d, "opt.pt"), "wb") as f:
        f.write(os.urandom(10000))
    mf.write(d, mf.build(d, step))
PYEOF
"""


def wait_sync_record(settings, job_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = [x for x in healthlog.read(settings.paths.health_log)
                if x.get("job_id") == job_id and x.get("context") == "sync"]
        if recs:
            return recs
        time.sleep(0.3)
    raise AssertionError(f"the epilog of job {job_id} logged no checkpoint sync")


def ensure_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def epilog_env(rec) -> dict:
    """The variables slurmd gives the epilog, from Slurm's record of the job (UserId=name(uid), GroupId=..)."""
    uid = re.search(r"\((\d+)\)", rec.raw.get("UserId", "")).group(1)
    gid = re.search(r"\((\d+)\)", rec.raw.get("GroupId", "")).group(1)
    return {"SLURM_JOB_ID": str(rec.job_id), "SLURM_JOB_USER": rec.user, "SLURM_JOB_UID": uid,
            "SLURM_JOB_GID": gid, "SLURM_JOB_NAME": rec.name, "SLURMD_NODENAME": rec.nodes}


@pytest.mark.compat("epilog sync")
@pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user and syncs as root, like the epilog")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_cancelled_job_leaves_exactly_its_three_complete_checkpoints(clean, tmp_path):
    cluster = clean
    user = ensure_user(USER)
    settings = config.load(str(cluster.site_config))
    assert settings.sync.enabled, "the dev cluster's site config enables the sync"
    local = cluster.dir / "local"
    script = cluster.dir / "local" / "sync-job.sh"
    script.write_text(JOB.format(repo=str(REPO), local=str(local)))
    script.chmod(0o755)
    r = cluster.run("sbatch", "--parsable", f"--uid={USER}", f"--gid={user.pw_gid}", "-p", "gpu", "-N1",
                    "-D", "/tmp", str(script))
    job_id = int(r.stdout.strip().split(";")[0])
    src = local / USER / str(job_id) / "ckpt"
    deadline = time.monotonic() + 90
    while not (src / ".writing-400").exists():
        assert time.monotonic() < deadline, f"job {job_id} never reached its fourth checkpoint: " \
                                            f"{cluster.job_state(job_id)}"
        time.sleep(0.3)
    rec = cluster.backend.job(job_id)
    assert rec.user == USER and rec.name == "train-sync"
    cluster.run("scancel", str(job_id))
    cluster.wait_job(job_id, states=("CANCELLED",), timeout=60)
    assert sorted(n for n in os.listdir(src) if not n.startswith(".")) == \
        ["step-0000000100", "step-0000000200", "step-0000000300", "step-0000000400"]
    assert mf.read(str(src / "step-0000000400")) is None  # the fourth is half-written
    env = epilog_env(rec)
    assert env["SLURM_JOB_UID"] == str(user.pw_uid)
    # the real epilog synced: its record in the health log (context "sync", this job)
    recs = wait_sync_record(settings, job_id)
    assert recs[-1]["status"] == "ok" and recs[-1]["action"] == "copied", recs[-1]
    assert recs[-1]["evidence"]["incomplete"] == ["step-0000000400"]
    dest = cluster.dir / "shared" / "ckpt" / USER / "train-sync"
    names = sorted(n for n in os.listdir(dest) if not n.startswith("."))
    assert names == ["step-0000000100", "step-0000000200", "step-0000000300"]
    for n in names:
        m = mf.read(str(dest / n))
        assert m is not None and mf.verify(str(dest / n), m) == []
        assert os.stat(dest / n / "opt.pt").st_uid == user.pw_uid  # written as the user, not root
    assert not [n for n in os.listdir(dest) if n.startswith(cs.TMP_PREFIX)]
    # run again (an epilog retry, or the lead's epilog having run first): nothing is copied twice
    rep = cs.sync_for_job(settings, env)
    assert rep["copied"] == [] and sorted(rep["skipped"]) == names


XID_JOB = """#!/bin/sh
#SBATCH -J train-xid
#SBATCH -o /dev/null
exec /usr/bin/python3 - <<'PYEOF'
import os, sys, time
sys.path.insert(0, {repo!r})
from slurmkit import checkpoint                   # standard library only: fine under the system python
root = "{local}/%s/%s/ckpt" % (os.environ["SLURM_JOB_USER"], os.environ["SLURM_JOB_ID"])
os.makedirs(root, exist_ok=True)
for step in (10, 20):
    def write(d, step=step):
        with open(os.path.join(d, "weights.bin"), "wb") as f:
            f.write(os.urandom(1 << 20) + str(step).encode())
    checkpoint.save(root, step, write)
open(os.path.join(root, ".saved-2"), "w").close()
go = "{gate}"
for _ in range(600):                              # the test makes the GPU fail now, then lets the job end
    if os.path.exists(go):
        break
    time.sleep(0.1)
PYEOF
"""


@pytest.mark.compat("epilog sync")
@pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user; the epilog syncs as root dropping to it")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_xid79_during_the_job_drains_the_node_and_still_syncs_its_checkpoints(clean):
    cluster = clean
    user = ensure_user(USER)
    settings = config.load(str(cluster.site_config))
    local = cluster.dir / "local"
    gate = local / f"go-{time.monotonic_ns()}"
    script = local / "xid-job.sh"
    script.write_text(XID_JOB.format(repo=str(REPO), local=str(local), gate=str(gate)))
    script.chmod(0o755)
    r = cluster.run("sbatch", "--parsable", f"--uid={USER}", f"--gid={user.pw_gid}", "-p", "gpu", "-w", "n3",
                    "--gpus-per-node=8", "-D", "/tmp", str(script))
    job_id = int(r.stdout.strip().split(";")[0])
    src = local / USER / str(job_id) / "ckpt"
    deadline = time.monotonic() + 90
    while not (src / ".saved-2").exists():
        assert time.monotonic() < deadline, f"job {job_id} never saved: {cluster.job_state(job_id)}"
        time.sleep(0.3)
    # the prolog passed on a healthy n3; now the GPU falls off the bus (the real Xid 79 capture), mid-job
    cluster.set_scenario("n3", "xid79")
    gate.touch()
    assert cluster.wait_job(job_id, states=("COMPLETED", "FAILED", "CANCELLED")).state == "COMPLETED"
    n3 = cluster.wait_node("n3", lambda n: n.drained, timeout=60)
    assert n3.reason.startswith("slurmkit:xid79 "), n3.reason
    # the epilog synced first, then judged: both records for this job, in that order
    recs = [x for x in healthlog.read(settings.paths.health_log) if x.get("job_id") == job_id
            and x.get("context") in ("sync", "epilog")]
    kinds = [(x["context"], x["check"], x["status"]) for x in recs]
    assert kinds[0] == ("sync", "checkpoint-sync", "ok"), kinds
    assert ("epilog", "xid", "fail") in kinds
    assert next(x for x in recs if x["check"] == "xid")["action"].startswith("drain"), recs
    dest = cluster.dir / "shared" / "ckpt" / USER / "train-xid"
    names = sorted(n for n in os.listdir(dest) if not n.startswith("."))
    assert names == ["step-0000000010", "step-0000000020"]
    for n in names:
        m = mf.read(str(dest / n))
        assert m is not None and mf.verify(str(dest / n), m) == [] and m["step"] == int(n.split("-")[1])
        assert os.stat(dest / n / "weights.bin").st_uid == user.pw_uid
