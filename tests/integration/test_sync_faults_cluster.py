"""Issue 20.5 on the real dev cluster: the real prolog records the job-record variables the sync's DEST pattern
needs ($SLURM_JOB_NAME: Slurm gives neither hook the job's name), the real epilog uses that record and removes
it, and an epilog whose job record cannot be read (a job id the controller does not know: `scontrol show job`
fails for real) still syncs from the prolog's record, or, with none, logs the command to finish by hand."""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import jobstate
from slurmkit.checkpoint import manifest as mf

REPO = Path(__file__).resolve().parents[2]
USER = "skg-alice"

JOB = """#!/bin/sh
#SBATCH -J train-rec
#SBATCH -o /dev/null
exec /usr/bin/python3 - <<'PYEOF'
import os, sys, time
sys.path.insert(0, {repo!r})
from slurmkit import checkpoint
root = "{local}/%s/%s/ckpt" % (os.environ["SLURM_JOB_USER"], os.environ["SLURM_JOB_ID"])
os.makedirs(root, exist_ok=True)
checkpoint.save(root, 7, lambda d: open(os.path.join(d, "w.bin"), "wb").write(os.urandom(1 << 16)))
open(os.path.join(root, ".saved"), "w").close()
for _ in range(900):
    if os.path.exists("{gate}"):
        break
    time.sleep(0.1)
PYEOF
"""


def sync_records(settings, job_id):
    return [x for x in healthlog.read(settings.paths.health_log)
            if x.get("job_id") == job_id and x.get("context") == "sync"]


def wait_for(pred, what, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def run_epilog(cluster, env):
    """The real epilog script, with what slurmd gives it (no PATH, Slurm's variables)."""
    e = {"SLURMKIT_CONFIG": str(cluster.site_config), "SLURM_CONF": str(cluster.conf),
         "SLURMKIT_FAKEGPU_DIR": os.environ.get("SLURMKIT_FAKEGPU_DIR", str(cluster.dir / "fakegpu")),
         "SLURMKIT_HOOK_CACHE_DIR": str(cluster.dir / "hookcache-test"), **env}
    return subprocess.run([str(REPO / "epilog" / "epilog")], env=e, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user; the hooks run as root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_the_prolog_records_the_job_name_and_an_epilog_without_a_job_record_uses_it(clean, sync_user):
    cluster = clean
    user = sync_user
    settings = config.load(str(cluster.site_config))
    # a fresh DEST: an earlier run's job of this name keeps its checkpoints (other series are never replaced)
    shutil.rmtree(cluster.dir / "shared" / "ckpt" / USER / "train-rec", ignore_errors=True)
    local = cluster.dir / "local"
    gate = local / f"go-{time.monotonic_ns()}"
    script = local / "rec-job.sh"
    script.write_text(JOB.format(repo=str(REPO), local=str(local), gate=str(gate)))
    script.chmod(0o755)
    r = cluster.run("sbatch", "--parsable", f"--uid={USER}", f"--gid={user.pw_gid}", "-p", "gpu", "-N1",
                    "-D", "/tmp", str(script))
    job_id = int(r.stdout.strip().split(";")[0])
    src = local / USER / str(job_id) / "ckpt"
    wait_for(lambda: (src / ".saved").exists(), f"job {job_id} to save")
    # the real prolog asked the controller and left the record, root-only
    state = Path(settings.paths.state_dir) / jobstate.DIRNAME / f"{job_id}.json"
    doc = json.loads(state.read_text())
    assert doc["job_id"] == str(job_id) and doc["vars"] == {"SLURM_JOB_NAME": "train-rec"}
    assert state.stat().st_uid == 0 and state.stat().st_mode & 0o077 == 0
    gate.touch()
    cluster.wait_job(job_id, states=("COMPLETED",), timeout=90)
    recs = wait_for(lambda: sync_records(settings, job_id), f"job {job_id}'s sync record")
    assert recs[-1]["status"] == "ok", recs[-1]
    dest = cluster.dir / "shared" / "ckpt" / USER / "train-rec"
    assert "step-0000000007" in os.listdir(dest)
    wait_for(lambda: not state.exists(), "the epilog to remove the record")

    # a job whose record the controller does not have (lost): `scontrol show job` fails for real
    lost = 990000 + job_id
    assert cluster.run("scontrol", "show", "job", str(lost), check=False).returncode != 0
    lsrc = local / USER / str(lost) / "ckpt"
    lsrc.mkdir(parents=True)
    d = lsrc / "step-0000000003"
    d.mkdir()
    (d / "w.bin").write_bytes(os.urandom(1000))
    mf.write(str(d), mf.build(str(d), 3))
    for p in (lsrc.parent, lsrc, d, d / "w.bin", d / mf.MANIFEST):
        os.chown(p, user.pw_uid, user.pw_gid)
    env = {"SLURM_JOB_ID": str(lost), "SLURM_JOB_USER": USER, "SLURM_JOB_UID": str(user.pw_uid),
           "SLURM_JOB_GID": str(user.pw_gid), "SLURMD_NODENAME": "n1"}
    # with the prolog's record (as the prolog writes it while the job record is fresh): synced
    state = Path(settings.paths.state_dir) / jobstate.DIRNAME / f"{lost}.json"
    state.write_text(json.dumps({"job_id": str(lost), "vars": {"SLURM_JOB_NAME": "train-rec"}}))
    state.chmod(0o600)
    r = run_epilog(cluster, env)
    assert r.returncode == 0, r.stderr
    rec = sync_records(settings, lost)[-1]
    assert rec["status"] == "ok" and rec["evidence"]["copied"] == ["step-0000000003"], rec
    assert "step-0000000003" in os.listdir(dest) and not state.exists()

    # without it: the sync fails loud, and says how to finish once the controller answers
    lost2 = lost + 1
    env2 = dict(env, SLURM_JOB_ID=str(lost2))
    os.rename(lsrc.parent, local / USER / str(lost2))
    cfg = cluster.dir / "slurmkit-nobg.yaml"
    cfg.write_text(Path(cluster.site_config).read_text().replace("  budget: 20\n", "  budget: 20\n  background: false\n"))
    r = run_epilog(cluster, dict(env2, SLURMKIT_CONFIG=str(cfg)))
    rec = sync_records(settings, lost2)[-1]
    assert rec["status"] == "fail" and "$SLURM_JOB_NAME is not set" in rec["reason"], rec
    assert rec["action"] == "deferred-manual"
    assert rec["evidence"]["finish"].startswith(f"manual: once `scontrol show job {lost2}` answers, run slurmkit sync")
