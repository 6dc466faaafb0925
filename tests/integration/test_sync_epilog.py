"""The checkpoint sync on the real dev cluster: a job (as an ordinary user) writes three checkpoints and is
cancelled while writing a fourth; the sync run as the epilog runs it (root, the job's Slurm variables taken from
Slurm's own job record) leaves exactly the three complete ones at the destination, verified, owned by the user."""
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
    rep = cs.sync_for_job(settings, env)
    assert rep["status"] == "ok", rep
    assert rep["incomplete"] == ["step-0000000400"]
    dest = cluster.dir / "shared" / "ckpt" / USER / "train-sync"
    names = sorted(n for n in os.listdir(dest) if not n.startswith("."))
    assert names == ["step-0000000100", "step-0000000200", "step-0000000300"]
    for n in names:
        m = mf.read(str(dest / n))
        assert m is not None and mf.verify(str(dest / n), m) == []
        assert os.stat(dest / n / "opt.pt").st_uid == user.pw_uid  # written as the user, not root
    assert not [n for n in os.listdir(dest) if n.startswith(cs.TMP_PREFIX)]
    recs = [x for x in healthlog.read(settings.paths.health_log) if x.get("job_id") == job_id
            and x.get("context") == "sync"]
    assert recs and recs[-1]["status"] == "ok" and recs[-1]["action"] in ("copied", "none")
    # run again (an epilog retry, or the lead's epilog having run first): nothing is copied twice
    rep = cs.sync_for_job(settings, env)
    assert rep["copied"] == [] and sorted(rep["skipped"]) == names
