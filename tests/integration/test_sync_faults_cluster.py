"""Issue 20.5 on the real dev cluster: the real prolog records the job-record variables the sync's DEST pattern
needs ($SLURM_JOB_NAME: Slurm gives neither hook the job's name), the real epilog uses that record and removes
it, and an epilog whose job record cannot be read (a job id the controller does not know: `scontrol show job`
fails for real) still syncs from the prolog's record, or, with none, logs the command to finish by hand."""
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import jobstate
from slurmkit.checkpoint import manifest as mf
from slurmkit.checkpoint.layout import LOCK_NAME, TMP_PREFIX

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


def wait_for(pred, what, timeout=90, every=0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def run_epilog(cluster, env):
    """The real epilog script, with what slurmd gives it (no PATH, Slurm's variables)."""
    e = {"SLURMKIT_CONFIG": str(cluster.site_config), "SLURM_CONF": str(cluster.conf),
         "SLURMKIT_FAKEGPU_DIR": os.environ.get("SLURMKIT_FAKEGPU_DIR", str(cluster.dir / "fakegpu")),
         **env}
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


# --- items 4, 7, 8: the real epilog (slurmd runs it after a real job) ------------------------------------------

SAVE_JOB = """#!/bin/sh
#SBATCH -J {name}
#SBATCH -o /dev/null
exec /usr/bin/python3 - <<'PYEOF'
import os, sys
sys.path.insert(0, {repo!r})
from slurmkit import checkpoint                   # standard library only: fine under the system python
root = "{local}/%s/%s/ckpt" % (os.environ["SLURM_JOB_USER"], os.environ["SLURM_JOB_ID"])
os.makedirs(root, exist_ok=True)
for step in {steps!r}:
    checkpoint.save(root, step, lambda d: open(os.path.join(d, "w.bin"), "wb").write(os.urandom({size})))
PYEOF
"""


def submit_saving_job(cluster, user, name, steps, size=1 << 16, *sbatch_args):
    """A real job of `user` that writes complete checkpoints `steps` on the node-local dir, then ends."""
    local = cluster.dir / "local"
    script = local / f"{name}-{time.monotonic_ns()}.sh"
    script.write_text(SAVE_JOB.format(name=name, repo=str(REPO), local=str(local), steps=tuple(steps), size=size))
    script.chmod(0o755)
    r = cluster.run("sbatch", "--parsable", f"--uid={USER}", f"--gid={user.pw_gid}", "-p", "gpu", "-N1",
                    "-D", "/tmp", *sbatch_args, str(script))
    return int(r.stdout.strip().split(";")[0])


def visible(d):
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


def fresh_dest(cluster, user, name):
    """DEST of `name` for USER, empty, owned by the user (as an earlier sync would have left it)."""
    base = cluster.dir / "shared" / "ckpt" / USER
    dest = base / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for p in (base, dest):
        os.chown(p, user.pw_uid, user.pw_gid)
    return dest


def sync_children(uid, job_id=None):
    """Pids of the epilog's dropped sync children: processes of `uid` running slurmkit.hooks.epilog whose
    parent is the root epilog (run_as forks, so the child has the epilog's command line); with `job_id`, only the
    children of that job's epilog (SLURM_JOB_ID in their environment): a sync child of an earlier job of the same
    user, still waiting on a destination, is not this job's."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
            status = (p / "status").read_text()
        except OSError:
            continue
        if b"slurmkit.hooks.epilog" not in cmd:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) != uid:
            continue
        if job_id is not None:
            try:
                env = (p / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"SLURM_JOB_ID={job_id}".encode() not in env:
                continue
        out.append(int(p.name))
    return out


@pytest.fixture
def no_background(clean):
    """The site config with sync.background off (so a deferred sync says the command to finish by hand), put back
    after. The settings file's stamp (the YAML's sha256) no longer matches, so the next epilog parses the change."""
    cfg = Path(clean.site_config)
    before = cfg.read_text()
    assert "  budget: 20\n" in before
    cfg.write_text(before.replace("  budget: 20\n", "  budget: 20\n  background: false\n"))
    try:
        yield clean
    finally:
        cfg.write_text(before)


@pytest.mark.compat("epilog sync")
@pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user; the hooks run as root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_a_killed_sync_child_is_a_logged_failure_with_the_command_to_finish(no_background, sync_user):
    """Item 4. The real epilog's sync child (dropped to the job's user) is killed with SIGKILL while it waits for
    DEST's lock (the test holds it, as a concurrent sync would): the health log says the sync failed, killed by
    SIGKILL, deferred to the manual path with a shell-quoted command; the checkpoint is still on the node-local dir,
    and pasting the command finishes the sync. Before the fix, run_as read the dead child's empty output as `{}`:
    the sync was "nothing", no record was written, and this test timed out waiting for the record."""
    cluster = no_background
    user = sync_user
    settings = config.load(str(cluster.site_config))
    name = "train-killed"
    dest = fresh_dest(cluster, user, name)
    lock = os.open(dest / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    os.fchown(lock, user.pw_uid, user.pw_gid)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        job_id = submit_saving_job(cluster, user, name, (7,))
        # the job stays COMPLETING while its epilog runs: look for the child meanwhile
        pids = wait_for(lambda: sync_children(user.pw_uid, job_id), f"job {job_id}'s epilog sync child", every=0.05)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)   # as the OOM killer would
        rec = wait_for(lambda: sync_records(settings, job_id), f"job {job_id}'s sync record")[-1]
    finally:
        os.close(lock)
    cluster.wait_job(job_id, states=("COMPLETED",), timeout=90)
    assert rec["status"] == "fail" and rec["reason"] == "sync child killed by SIGKILL", rec
    assert rec["action"] == "deferred-manual" and rec["evidence"]["child_signal"] == "SIGKILL", rec
    src = cluster.dir / "local" / USER / str(job_id) / "ckpt"
    assert rec["evidence"]["source"] == str(src) and rec["evidence"]["dest"] == str(dest)
    assert (src / "step-0000000007").is_dir() and mf.read(str(src / "step-0000000007")) is not None
    assert visible(dest) == []
    finish = rec["evidence"]["finish"]
    assert finish.startswith("manual: "), finish
    argv = shlex.split(finish[len("manual: "):])
    assert argv == ["slurmkit", "sync", "--user", USER, "--series", str(job_id), "--", str(src), str(dest)]
    # what an admin does with it: paste it (the lock is free now); the checkpoint arrives, verified, the user's
    r = cluster.slurmkit(*argv[1:], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert visible(dest) == ["step-0000000007"]
    m = mf.read(str(dest / "step-0000000007"))
    assert m is not None and mf.verify(str(dest / "step-0000000007"), m) == []
    assert os.stat(dest / "step-0000000007" / "w.bin").st_uid == user.pw_uid


def slurmd_ns(cluster, node):
    """The argv prefix that runs a command where `node`'s slurmd (and so its epilog) sees mounts: nothing on
    22.05 (the host's daemons); on 24.11/26.05 the daemons run in a root fs with a private mount namespace
    (dev/rootfs.py), so a tmpfs the test mounts must be mounted (and looked at) in there."""
    want = b"\0".join([b"-f", str(cluster.conf).encode(), b"-N", node.encode()])
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
            if b"slurmd\0" in cmd and want in cmd:
                if os.readlink(p / "ns" / "mnt") == os.readlink("/proc/self/ns/mnt"):
                    return []
                return ["nsenter", "-t", p.name, "-m", "-r", "--"]
        except OSError:
            continue
    pytest.fail(f"no slurmd -N {node} of this cluster running")


@pytest.fixture
def small_dest(clean, sync_user):
    """A 2 MiB tmpfs mounted as the DEST of job name train-full (the user's, like any DEST) where n1's slurmd
    sees it, unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    dest = fresh_dest(clean, sync_user, "train-full")
    ns = slurmd_ns(clean, "n1")
    r = subprocess.run(ns + ["mount", "-t", "tmpfs", "-o", f"size=2m,mode=0755,uid={sync_user.pw_uid},"
                             f"gid={sync_user.pw_gid}", "tmpfs", str(dest)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount of a 2 MiB tmpfs refused here: {r.stderr.strip()}")
    try:
        yield clean, dest, ns
    finally:
        subprocess.run(ns + ["umount", str(dest)], check=False)
        shutil.rmtree(dest, ignore_errors=True)


def _out(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


@pytest.mark.compat("epilog sync")
@pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user; the hooks run as root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_a_full_destination_is_an_enospc_failure_and_is_not_left_full(small_dest, sync_user):
    """Item 7. A real job writes a 3 MiB checkpoint; its DEST is a 2 MiB tmpfs. The real epilog's sync fails with
    ENOSPC in the health log, and afterwards the tmpfs holds no temporary copy and has its space back (df).
    Before the fix the partial hidden temporary copy stayed, so the listing showed a .slurmkit-tmp-* entry and
    the tmpfs stayed (nearly) full."""
    cluster, dest, ns = small_dest
    settings = config.load(str(cluster.site_config))
    free = lambda: int(_out(ns + ["stat", "-f", "-c", "%a", str(dest)]).strip())  # noqa: E731 - blocks free
    free_before = free()
    job_id = submit_saving_job(cluster, sync_user, "train-full", (1,), 3 << 20, "-w", "n1")
    cluster.wait_job(job_id, states=("COMPLETED",), timeout=90)
    recs = wait_for(lambda: sync_records(settings, job_id), f"job {job_id}'s sync record")
    rec = recs[-1]
    assert rec["status"] == "fail" and "No space left on device" in rec["reason"], json.dumps(rec)
    # a background sync handed the rest retries and fails the same way: let it finish before looking
    if rec["action"] == "deferred-background":
        wait_for(lambda: any(x.get("phase") == "sync-background" for x in sync_records(settings, job_id)),
                 "the background sync's record", timeout=120)
    listing = _out(ns + ["ls", "-A", str(dest)]).split()
    assert [n for n in listing if n.startswith(TMP_PREFIX)] == [], listing
    assert [n for n in listing if not n.startswith(".")] == [], listing
    df = _out(ns + ["df", "-B1", str(dest)])
    assert free() >= free_before - 8, df          # a few blocks of directories and the lock
    src = cluster.dir / "local" / USER / str(job_id) / "ckpt"
    assert mf.read(str(src / "step-0000000001")) is not None        # the checkpoint is still on the node


TWIN_JOB = """#!/bin/sh
#SBATCH -J train-twin
#SBATCH -o /dev/null
exec /usr/bin/python3 - <<'PYEOF'
import os, sys, time
sys.path.insert(0, {repo!r})
from slurmkit import checkpoint
root = "{local}/%s/%s/ckpt" % (os.environ["SLURM_JOB_USER"], os.environ["SLURM_JOB_ID"])
os.makedirs(root, exist_ok=True)
first = os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
for step in ((4, 5, 6) if first else (7,)):
    checkpoint.save(root, step, lambda d: open(os.path.join(d, "w.bin"), "wb").write(os.urandom(1 << 16)))
if first:                                          # the test requeues it now (as a preemption would)
    open(os.path.join(root, ".saved"), "w").close()
    time.sleep(600)
PYEOF
"""


@pytest.mark.compat("epilog sync")
@pytest.mark.skipif(os.geteuid() != 0, reason="submits as another user; the hooks run as root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_two_jobs_of_one_name_keep_each_others_checkpoints(clean, sync_user):
    """Item 8. Two real jobs named train-twin (one DEST; the site's keep is 3): job A syncs steps 1-3; job B
    writes 4-6, is requeued, and writes 7. B's epilogs never prune A's checkpoints; the health log of B's first
    sync names A's as kept (other jobs'), and its second says it pruned B's own step 4 and why (keep=3, newest 3
    of job B). Before the fix, retention counted all of DEST: B's first sync pruned A's steps 1-3 without a word
    (A's checkpoints were gone from DEST and its record had no kept_other_jobs / prune_reason)."""
    cluster = clean
    user = sync_user
    settings = config.load(str(cluster.site_config))
    assert settings.sync.keep == 3
    dest = fresh_dest(cluster, user, "train-twin")
    a = submit_saving_job(cluster, user, "train-twin", (1, 2, 3))
    cluster.wait_job(a, states=("COMPLETED",), timeout=90)
    ra = wait_for(lambda: sync_records(settings, a), f"job {a}'s sync record")[-1]
    assert ra["status"] == "ok", ra
    assert visible(dest) == ["step-0000000001", "step-0000000002", "step-0000000003"]

    local = cluster.dir / "local"
    script = local / f"twin-{time.monotonic_ns()}.sh"
    script.write_text(TWIN_JOB.format(repo=str(REPO), local=str(local)))
    script.chmod(0o755)
    r = cluster.run("sbatch", "--parsable", "--requeue", f"--uid={USER}", f"--gid={user.pw_gid}", "-p", "gpu",
                    "-N1", "-D", "/tmp", str(script))
    b = int(r.stdout.strip().split(";")[0])
    src = local / USER / str(b) / "ckpt"
    wait_for(lambda: (src / ".saved").exists(), f"job {b} to save its first checkpoints")
    cluster.backend.requeue(b, start_now=True)
    first = wait_for(lambda: sync_records(settings, b), f"job {b}'s first sync record")[-1]
    assert visible(dest) == ["step-0000000001", "step-0000000002", "step-0000000003",   # A's are all still there
                             "step-0000000004", "step-0000000005", "step-0000000006"], first
    assert first["status"] == "ok" and first["evidence"]["copied"] == \
        ["step-0000000006", "step-0000000005", "step-0000000004"], first
    assert first["evidence"]["kept_other_jobs"] == ["step-0000000001", "step-0000000002", "step-0000000003"]
    assert "pruned" not in first["evidence"], first
    cluster.wait_job(b, states=("COMPLETED",), timeout=180)
    second = wait_for(lambda: sync_records(settings, b)[1:], f"job {b}'s second sync record", timeout=90)[-1]
    assert second["status"] == "ok" and second["evidence"]["copied"] == ["step-0000000007"], second
    assert second["evidence"]["pruned"] == ["step-0000000004"]
    assert second["evidence"]["prune_reason"] == f"keep=3: older than the newest 3 of job {b}"
    # what the users see at DEST: A's three, untouched, and B's newest three
    assert visible(dest) == ["step-0000000001", "step-0000000002", "step-0000000003",
                             "step-0000000005", "step-0000000006", "step-0000000007"]
    for n in visible(dest):
        m = mf.read(str(dest / n))
        assert m is not None and mf.verify(str(dest / n), m) == []
