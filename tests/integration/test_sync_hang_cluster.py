"""Issue 28 item 4 on the real dev cluster: a checkpoint destination that stops answering (a frozen filesystem, as a
hard-mounted NFS server that went away) must not hold the epilog past its budget. The destination here is a real
ext4 filesystem on a loop device, frozen with `fsfreeze --freeze`: every write to it sleeps in the kernel (D state,
deaf to SIGKILL) until the thaw. The real job checkpoints, the real slurmd runs the real epilog; the epilog returns
within its sync budget, the node is not drained (unless the site asks for it with sync.drain_on_hang), the health
log says "deferred: destination not answering", and after the thaw the background sync publishes the checkpoint.

The mount is made where n1's slurmd (and so its epilog) sees it: the host's namespace on 22.05, the root fs's
private one on 24.11/26.05 (slurmd_ns). The filesystem is always thawed and unmounted in a finally: a frozen
filesystem left behind hangs whoever touches it next."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.checkpoint.layout import TMP_PREFIX

from test_sync_faults_cluster import USER, fresh_dest, slurmd_ns, submit_saving_job, sync_records, wait_for

REPO = Path(__file__).resolve().parents[2]
NAME = "train-frozen"
ROOT = os.geteuid() == 0


def _run(argv, check=True, timeout=30):
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture
def frozen_dest(clean, sync_user):
    """DEST of job name train-frozen: a 64 MiB ext4 on a loop device (the user's, like any DEST), mounted where n1's
    slurmd sees it and frozen; yields (cluster, dest, ns, thaw). Thawed, unmounted and removed after, always."""
    cluster = clean
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no loop devices here")
    dest = fresh_dest(cluster, sync_user, NAME)
    ns = slurmd_ns(cluster, "n1")
    img = cluster.dir / f"frozen-{time.monotonic_ns()}.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    _run(["mkfs.ext4", "-q", "-F", str(img)])
    r = _run(ns + ["mount", "-o", "loop", str(img), str(dest)], check=False)
    if r.returncode != 0:
        img.unlink()
        pytest.skip(f"a loop mount is refused here: {r.stderr.strip()}")
    frozen = False
    dev = _run(ns + ["stat", "-c", "%d", str(dest)]).stdout.strip()      # the loop fs's device number

    def thaw():
        nonlocal frozen
        if frozen:
            _run(ns + ["fsfreeze", "--unfreeze", str(dest)], check=False)
            frozen = False

    try:
        _run(ns + ["rmdir", str(dest / "lost+found")])
        _run(ns + ["chown", f"{sync_user.pw_uid}:{sync_user.pw_gid}", str(dest)])
        _run(ns + ["fsfreeze", "--freeze", str(dest)])
        frozen = True
        yield cluster, dest, ns, thaw
    finally:
        thaw()
        # the background sync (or a sync child killed while frozen) may still be finishing: let it, then unmount
        for _ in range(60):
            if _run(ns + ["umount", str(dest)], check=False).returncode == 0:
                break
            time.sleep(1)
        else:
            _run(ns + ["umount", "-l", str(dest)], check=False)
        release_copies(int(dev))
        img.unlink(missing_ok=True)


def release_copies(dev):
    """Lazily unmount this test's loop filesystem from every other mount namespace: a namespace made while it was
    mounted (another engineer's `dev/rootfs.py run`: unshare, then rbind /tmp) holds a private copy of the mount,
    and with it the loop device, until that namespace ends. Only this device's mounts are touched."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    seen = set()
    for p in Path("/proc").iterdir():
        try:
            mnt = os.readlink(p / "ns" / "mnt") if p.name.isdigit() else None
        except OSError:
            continue
        if mnt is None or mnt in seen:
            continue
        seen.add(mnt)
        enter = ["nsenter", "-t", p.name, "-m", "--"]   # the namespace's own root: mounts outside a chroot too
        r = _run(enter + ["cat", "/proc/self/mountinfo"], check=False)
        points = [line.split()[4] for line in r.stdout.splitlines() if line.split()[2:3] == [want]]
        for point in sorted(points, key=len, reverse=True):
            _run(enter + ["umount", "-l", point], check=False)


def dest_view(ns, dest):
    """What is at DEST, looked at where slurmd sees it: {name: [manifest verifies, owner uid]} and the hidden names."""
    code = (
        "import json, os, sys\n"
        "from slurmkit.checkpoint import manifest as mf\n"
        "d = sys.argv[1]\n"
        "out = {'hidden': sorted(n for n in os.listdir(d) if n.startswith('.')), 'ckpts': {}}\n"
        "for n in sorted(os.listdir(d)):\n"
        "    if not n.startswith('.'):\n"
        "        m = mf.read(os.path.join(d, n))\n"
        "        ok = m is not None and mf.verify(os.path.join(d, n), m) == []\n"
        "        out['ckpts'][n] = [ok, os.stat(os.path.join(d, n, 'w.bin')).st_uid]\n"
        "print(json.dumps(out))\n"
    )
    r = _run(ns + [sys.executable, "-c", code, str(dest)], timeout=60)
    return json.loads(r.stdout)


def left_running(cluster, job_id):
    st = cluster.backend.job(job_id).state
    return st not in ("PENDING", "CONFIGURING", "RUNNING") and st


def end_job_on_frozen_dest(cluster, sync_user, budget):
    """A real job on n1 writes one checkpoint and ends while its DEST is frozen. Returns (job id, seconds from the
    job's end to the end of its epilog) and asserts the epilog came back within the sync budget and a little."""
    job_id = submit_saving_job(cluster, sync_user, NAME, (1,), 1 << 16, "-w", "n1")
    wait_for(lambda: left_running(cluster, job_id), f"job {job_id} to end", every=0.1)
    t0 = time.monotonic()
    # the epilog's sync budget (20 s in the dev site config), its health checks, a margin; PrologEpilogTimeout=60
    cluster.wait_job(job_id, states=("COMPLETED",), timeout=budget + 15, interval=0.2)
    took = time.monotonic() - t0
    assert took < budget + 10, f"the epilog took {took:.1f} s with a {budget} s sync budget"
    return job_id, took


@pytest.mark.compat("epilog sync")
@pytest.mark.skipif(not ROOT, reason="mounts a filesystem; submits as another user; the hooks run as root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_a_frozen_destination_defers_within_the_budget_and_the_background_finishes_after_the_thaw(
    frozen_dest, sync_user
):
    """Before the fix the epilog killed its sync child at the budget and then waited for it (waitpid): a child
    asleep in the kernel on a frozen filesystem does not die until the thaw, so the epilog outlived its budget
    (the job stayed COMPLETING until PrologEpilogTimeout, then the node was drained "Epilog error")."""
    cluster, dest, ns, thaw = frozen_dest
    settings = config.load(str(cluster.site_config))
    job_id, _ = end_job_on_frozen_dest(cluster, sync_user, settings.sync.budget)
    node = cluster.node("n1")
    assert not node.drained and node.state == "IDLE", node.to_dict()
    rec = sync_records(settings, job_id)[-1]
    assert rec["status"] == "warn" and rec["action"] == "deferred-background", rec
    assert rec["reason"].startswith("deferred: destination not answering"), rec
    assert rec["evidence"]["child_state"].startswith("D"), rec      # the copier, asleep in the kernel
    assert rec["evidence"]["seconds"] <= settings.sync.budget, rec
    src = cluster.dir / "local" / USER / str(job_id) / "ckpt"
    assert (src / "step-0000000001").is_dir()                        # still on the node meanwhile
    thaw()
    bg = wait_for(lambda: [x for x in sync_records(settings, job_id) if x.get("phase") == "sync-background"],
                  f"job {job_id}'s background sync record", timeout=120)[-1]
    assert bg["status"] == "ok" and bg["evidence"]["copied"] == ["step-0000000001"], bg
    view = dest_view(ns, dest)
    assert view["ckpts"] == {"step-0000000001": [True, sync_user.pw_uid]}, view
    assert [n for n in view["hidden"] if n.startswith(TMP_PREFIX)] == [], view


@pytest.mark.skipif(not ROOT, reason="mounts a filesystem; submits as another user; the hooks run as root")
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="the job needs a system python3")
def test_a_site_that_asks_for_it_drains_on_a_frozen_destination(frozen_dest, sync_user):
    """sync.drain_on_hang: true (default false): the same hang drains the node with a slurmkit reason that says
    what happened, and the epilog still returns on time. Before the option, the node stayed up (or, before the
    deadline fix, was drained with Slurm's bare "Epilog error")."""
    cluster, dest, ns, thaw = frozen_dest
    cfg = Path(cluster.site_config)
    before = cfg.read_text()
    assert "  budget: 20\n" in before
    cfg.write_text(before.replace("  budget: 20\n", "  budget: 20\n  drain_on_hang: true\n"))
    try:
        settings = config.load(str(cfg))
        job_id, _ = end_job_on_frozen_dest(cluster, sync_user, settings.sync.budget)
        node = cluster.wait_node("n1", lambda n: n.drained)
        assert node.reason.startswith("slurmkit:checkpoint-sync destination not answering"), node.to_dict()
        rec = sync_records(settings, job_id)[-1]
        assert rec["reason"].startswith("deferred: destination not answering"), rec
        assert rec["evidence"]["drain"].startswith("drained"), rec
    finally:
        cfg.write_text(before)
        thaw()
