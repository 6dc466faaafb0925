"""Issue 28.7 on the real dev cluster: the health log's directory read-only or full where n1's slurmd runs its
hooks (a read-only bind mount, or a full 64 KiB tmpfs, in that slurmd's mount namespace: root ignores mode bits,
and on 24.11/26.05 each daemon runs in a root fs namespace of its own). Healthy jobs still run and the node stays in service (the verdict stands),
and every prolog and epilog says that its records are lost: in slurmd's log (slurmd logs nothing of a hook that
exits 0) and in syslog (a datagram socket served here, named to the hooks by SLURMKIT_SYSLOG_SOCKET through a
per-node hook wrapper; no syslog daemon runs on the test machines)."""
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _in_slurmd_ns(c, node: str, *argv: str) -> subprocess.CompletedProcess:
    pid = (c.dir / "run" / f"slurmd-{node}.pid").read_text().strip()
    return subprocess.run(["nsenter", "-t", pid, "-m", "-r", "--", *argv], capture_output=True, text=True,
                          timeout=30)


@pytest.fixture(params=["read-only", "full"])
def read_only_log(request, clean):
    """The health log's directory, where n1's slurmd runs its hooks: a read-only bind of itself, or a 64 KiB
    tmpfs filled to the last block (the node's files made first: their appends hit ENOSPC)."""
    c = clean
    d = str(c.dir / "slurmkit" / "health")
    Path(d).mkdir(parents=True, exist_ok=True)
    if request.param == "read-only":
        r = _in_slurmd_ns(c, "n1", "mount", "--bind", d, d)
    else:
        r = _in_slurmd_ns(c, "n1", "mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=64", "tmpfs", d)
    if r.returncode != 0:
        pytest.skip(f"cannot mount in slurmd's namespace here: {r.stderr}")
    try:
        if request.param == "read-only":
            r = _in_slurmd_ns(c, "n1", "mount", "-o", "remount,ro,bind", d)
        else:
            r = _in_slurmd_ns(c, "n1", "sh", "-c", f"touch {d}/n1.jsonl {d}/.n1.lock;"
                              f" dd if=/dev/zero of={d}/filler bs=4096 2>/dev/null; test -s {d}/filler")
        assert r.returncode == 0, r.stderr
        yield c
    finally:
        _in_slurmd_ns(c, "n1", "umount", "-l", d)


@pytest.fixture
def syslog_wrappers(read_only_log):
    c = read_only_log
    path = c.dir / "syslog-test.sock"
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(str(path))
    srv.settimeout(0.2)
    hooks = []
    for which in ("prolog", "epilog"):
        h = c.dir / "hooks" / f"{which}.n1"
        h.write_text(f"#!/bin/sh\nSLURMKIT_SYSLOG_SOCKET={path}\nexport SLURMKIT_SYSLOG_SOCKET\n"
                     f"exec {REPO}/{which}/{which} \"$@\"\n")
        h.chmod(0o755)
        hooks.append(h)
    try:
        yield c, srv
    finally:
        for h in hooks:
            h.unlink(missing_ok=True)
        srv.close()
        path.unlink(missing_ok=True)


def _syslog(srv) -> list[str]:
    out = []
    while True:
        try:
            out.append(srv.recv(65536).decode(errors="replace"))
        except (socket.timeout, BlockingIOError):
            return out


@pytest.mark.compat("prolog drain")
def test_a_health_log_that_cannot_be_written_is_said_every_time_and_jobs_still_run(syslog_wrappers):
    c, srv = syslog_wrappers
    log = c.dir / "log" / "slurmd-n1.log"
    start = log.stat().st_size
    msgs: list[str] = []
    jobs = []
    for _ in range(2):
        j = c.sbatch("#!/bin/sh\ntrue\n", "--gres=gpu:1", "-o", "/dev/null", "-w", "n1")
        c.wait_job(j, timeout=90)
        jobs.append(j)
        want = [f"slurmkit {w}: node n1 job {j}: cannot write the health log" for w in ("prolog", "epilog")]
        deadline = time.monotonic() + 30
        while True:
            with open(log, "rb") as f:
                f.seek(start)
                lines = f.read().decode(errors="replace").splitlines()
            msgs += _syslog(srv)
            in_log = [w for w in want if any(w in ln and "] error: " in ln for ln in lines)]
            in_syslog = [w for w in want if any(w in m and m.startswith("<27>") for m in msgs)]
            if (len(in_log), len(in_syslog)) == (2, 2) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert in_log == want, lines[-10:]
        assert in_syslog == want, msgs[-4:]
        assert "the verdict stands: healthy" in next(ln for ln in lines if want[0] in ln)
    n1 = c.node("n1")
    assert not n1.drained, n1             # the verdict (healthy) stands: the node stays in service
    assert [c.job_state(j) for j in jobs] == ["COMPLETED", "COMPLETED"]
