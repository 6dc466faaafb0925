"""Issue 28 item 4: the epilog's sync keeps its deadline when the copier is stuck in the kernel (a frozen or hung
destination). The deadline logic (privsep.collect/outcome) with a child that will not die; a real child asleep on a
frozen ext4 loop filesystem (root only, in a private mount namespace of its own, so nothing leaks to the host);
what the health log says; the site option's validation. The dev-cluster half is
tests/integration/test_sync_hang_cluster.py."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurmkit import config, healthlog
from slurmkit.checkpoint import epilog as ep
from slurmkit.checkpoint import privsep
from slurmkit.checkpoint.report import SyncReport
from slurmkit.errors import UsageError

REPO = Path(__file__).resolve().parents[3]


def _sleeper():
    """A child that says nothing for a long time (the real one is asleep in the kernel)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        time.sleep(60)
        os._exit(0)
    os.close(w)
    return pid, r


def test_a_child_that_sigkill_cannot_end_is_left_behind_at_the_deadline():
    # synthetic: kill() that does not take (a child in D state) and waitpid() that never reaps it
    pid, r = _sleeper()
    kills = []
    try:
        t0 = time.monotonic()
        c = privsep.collect(pid, r, t0 + 0.3, 0.2, waitpid=lambda p, f: (0, 0), kill=lambda p, s: kills.append(s))
        took = time.monotonic() - t0
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert 0.45 <= took < 1.0, took                       # the deadline plus the grace, not the child's 60 s
    assert kills == [signal.SIGKILL] and c.killed and c.wstatus is None
    assert c.stuck == "not reaped"
    rep = privsep.outcome(c)
    assert rep["status"] == "partial" and rep["deferred"] == ["*"] and rep["killed"] is True
    assert rep["hung"] == "destination not answering" and rep["child_state"] == "not reaped"


def test_a_child_killed_at_the_deadline_that_dies_is_a_plain_budget_overrun():
    pid, r = _sleeper()
    try:
        t0 = time.monotonic()
        c = privsep.collect(pid, r, t0 + 0.2, 5.0)
        took = time.monotonic() - t0
    finally:
        os.close(r)
    assert took < 2.0 and c.killed and c.wstatus is not None and os.WTERMSIG(c.wstatus) == signal.SIGKILL
    rep = privsep.outcome(c)
    assert rep == {"status": "partial", "errors": [], "killed": True, "deferred": ["*"]}


def test_a_child_that_answers_is_reaped_and_its_report_read():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, json.dumps({"status": "ok", "copied": ["step-1"]}).encode())
        os._exit(0)
    os.close(w)
    try:
        c = privsep.collect(pid, r, time.monotonic() + 10, 0.5)
    finally:
        os.close(r)
    assert not c.killed and c.wstatus == 0 and not c.stuck
    assert privsep.outcome(c) == {"status": "ok", "copied": ["step-1"]}


def test_the_state_of_a_thread_is_read_after_its_name():
    # synthetic /proc/PID/stat lines: a command name may hold spaces and parentheses
    assert privsep.thread_state(b"1234 (python3) D 1 1234 1234 0 -1") == "D"
    assert privsep.thread_state(b"1234 (a) R (b)) S 1 1234") == "S"
    assert privsep.thread_state(b"") == ""
    assert privsep.kernel_sleep(os.getpid()) == ""        # this process, running: not asleep in the kernel


def job_env(user):
    return {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_JOB_UID": str(user.pw_uid),
            "SLURM_JOB_USER": user.pw_name}


def test_a_hung_sync_says_so_in_the_health_log_and_goes_to_the_background(tmp_path, monkeypatch, sync_user):
    s = config.loads(f"""
paths:
  health_log: {tmp_path}/health.jsonl
  state_dir: {tmp_path}/state
sync:
  enabled: true
  source: {tmp_path}/src
  dest: {tmp_path}/dst
""")
    (tmp_path / "src").mkdir()
    hung = SyncReport.from_dict({"status": "partial", "errors": [], "killed": True, "deferred": ["*"],
                                 "hung": "destination not answering", "child_state": "D (percpu_rwsem_wait)"})
    monkeypatch.setattr(ep, "run_as", lambda *a, **k: hung)         # what run_as returns for a frozen DEST
    monkeypatch.setattr(ep, "_spawn_background", lambda settings, environ: 4242)
    monkeypatch.setattr(ep, "_drain_on_hang", lambda *a: pytest.fail("drained without sync.drain_on_hang"))
    rep = ep.sync_for_job(s, job_env(sync_user))
    assert rep["finish"] == "background" and rep["background_pid"] == 4242 and "drain" not in rep
    (rec,) = healthlog.read(str(tmp_path / "health.jsonl"))
    assert rec["reason"] == "deferred: destination not answering; the rest left for background", rec
    assert rec["status"] == "warn" and rec["action"] == "deferred-background"
    assert rec["evidence"]["child_state"] == "D (percpu_rwsem_wait)" and rec["evidence"]["hung"]


def test_the_epilog_kills_and_gives_up_on_its_child_inside_the_budget(tmp_path, monkeypatch, sync_user):
    s = config.loads(f"sync:\n  enabled: true\n  source: {tmp_path}/src\n  dest: {tmp_path}/dst\n  budget: 20\n")
    (tmp_path / "src").mkdir()
    seen = {}

    def fake_run_as(identity, fn, *args, timeout=None, before=None, grace=None):
        seen.update(timeout=timeout, grace=grace, deadline_in=args[3])
        return SyncReport()
    monkeypatch.setattr(ep, "run_as", fake_run_as)
    ep.sync_for_job(s, job_env(sync_user))
    # the child stops itself at 18 s; killed at 19 s; given up on by 19.5 s: the epilog keeps its 20 s
    assert seen["grace"] == 0.5 and 18.9 < seen["timeout"] <= 19.0 and 17.9 < seen["deadline_in"] <= 18.0
    assert seen["timeout"] + seen["grace"] < 20.0


@pytest.mark.parametrize("value", ["maybe", "1", "[true]"])
def test_drain_on_hang_takes_true_or_false_only(value):
    with pytest.raises(UsageError, match=r"<config>:3: sync.drain_on_hang: expected true or false"):
        config.loads(f"sync:\n  enabled: false\n  drain_on_hang: {value}\n")
    assert config.loads("sync:\n  enabled: false\n").sync.drain_on_hang is False


# --- a real child asleep on a frozen filesystem -----------------------------------------------------------------

# runs as root in a private mount namespace (unshare): a loop ext4 is mounted and frozen there, and an "epilog"
# process (stdout a pipe to this script, as slurmd's is) calls run_as with a 1 s budget on a copier that writes
# to the frozen fs. The script says how long the epilog took to exit and to close its stdout, then thaws: the
# namespace and its mount go when the last process in it does, so nothing is left mounted on the host.
FROZEN = r"""
import json, os, select, subprocess, sys, time
work = sys.argv[1]
img, mnt = os.path.join(work, "f.img"), os.path.join(work, "mnt")
os.mkdir(mnt)
with open(img, "wb") as f:
    f.truncate(64 << 20)
subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True)
subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
out = {}
try:
    subprocess.run(["fsfreeze", "--freeze", mnt], check=True)
    try:
        epilog = subprocess.Popen([sys.executable, "-c", EPILOG, mnt], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t0, data = time.monotonic(), b""
        while time.monotonic() - t0 < 8:
            ready, _, _ = select.select([epilog.stdout], [], [], 0.1)
            if ready:
                b = os.read(epilog.stdout.fileno(), 65536)
                if not b:
                    out["eof_after"] = round(time.monotonic() - t0, 2)
                    break
                data += b
        out["exited"] = epilog.poll()
        out["report"] = data.decode()
    finally:
        subprocess.run(["fsfreeze", "--unfreeze", mnt], check=True)
    epilog.wait(30)
finally:
    for _ in range(50):
        if subprocess.run(["umount", mnt]).returncode == 0:
            break
        time.sleep(0.2)
print(json.dumps(out))
"""

EPILOG = r"""
import json, os, sys
from slurmkit.checkpoint import privsep

def copier(d):
    with open(os.path.join(d, "w.bin"), "wb") as f:    # blocks in the kernel: the fs is frozen
        f.write(b"x")
    return {"status": "ok"}

rep = privsep.run_as((0, 0, "root"), copier, sys.argv[1], timeout=1.0)
print(json.dumps(rep.as_dict()), flush=True)
"""


def private_or_unchanged(path):
    """unshare's --propagation: private, so the loop mount never reaches the host; inside dev/rootfs.py's chroot
    (24.11/26.05) '/' is not a mount point and unshare cannot change it, but that namespace is private already:
    there "unchanged", once /proc/self/mountinfo says the mount holding `path` is not shared."""
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "true"], capture_output=True)
    if probe.returncode == 0:
        return "private"
    best, shared = "", True
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point, optional = fields[4], fields[6:fields.index("-")]
            if (str(path) + "/").startswith(point.rstrip("/") + "/") and len(point) >= len(best):
                best, shared = point, any(o.startswith("shared:") for o in optional)
    if shared:
        pytest.skip(f"cannot make a private mount namespace here: {probe.stderr.decode().strip()}")
    return "unchanged"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts and freezes a loop filesystem")
@pytest.mark.skipif(not os.path.exists("/dev/loop-control") or not shutil.which("fsfreeze")
                    or not shutil.which("unshare"), reason="needs loop devices, fsfreeze and unshare")
def test_a_copier_asleep_on_a_frozen_filesystem_does_not_hold_the_epilog(tmp_path):
    """Before the fix, run_as waited for the killed child (waitpid): the epilog stayed until the thaw (no EOF in
    8 s); a child still holding the epilog's stdout would do the same to slurmd, which reads it to its end."""
    script = FROZEN.replace("EPILOG, mnt", f"{EPILOG!r}, mnt")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(["unshare", "--mount", "--propagation", private_or_unchanged(tmp_path), "--", sys.executable,
                        "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out.get("eof_after") is not None and out["eof_after"] < 3.0, out
    rep = json.loads(out["report"])
    assert rep["status"] == "partial" and rep["deferred"] == ["*"] and rep["killed"] is True, rep
    assert rep["hung"] == "destination not answering" and rep["child_state"].startswith("D"), rep
