"""A health log that cannot be written (issue 28.7): its directory read-only (a read-only bind mount: root ignores
mode bits) or its filesystem full (a 64 KiB tmpfs, filled). The real prolog and epilog scripts run as Slurm runs
them: the verdict stands (exit 0 on a healthy node, 1 on a faulty one), and every run says loudly that its records
are lost, on stderr, in slurmd's log file and in syslog (a datagram socket served here: no syslog runs on the test
machines). The slurm.conf here is synthetic: only the keys the hooks read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hooksite import write_site_config
from syslogsock import received, syslog_sock  # noqa: E402,F401 - syslog_sock: a fixture

REPO = Path(__file__).resolve().parents[3]
SCEN = REPO / "dev" / "fakegpu" / "scenarios"


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)


@pytest.fixture(params=["read-only", "full"])
def broken_log(request, tmp_path):
    """tmp_path/health: a directory the hooks cannot write, as root too."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mount")
    d = tmp_path / "health"
    d.mkdir()
    try:
        if request.param == "read-only":
            _mount("--bind", str(d), str(d))
            _mount("-o", "remount,ro,bind", str(d))
        else:
            _mount("-t", "tmpfs", "-o", "size=64k,nr_inodes=64", "tmpfs", str(d))
            for name in ("n1.jsonl", ".n1.lock"):  # the node's files are there: its append hits ENOSPC
                (d / name).write_bytes(b"")
            fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, timeout=30)
        pytest.skip(f"cannot mount here: {e}")
    except BaseException:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, timeout=30)
        raise
    try:
        yield request.param, d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, timeout=30)


def _env(tmp_path: Path, job: int, scenario: str, syslog_path: Path) -> dict:
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"# synthetic: only the keys the hooks read\nSlurmdLogFile={tmp_path}/slurmd-%n.log\n"
                    "PrologEpilogTimeout=60\n")
    log = tmp_path / "slurmd-n1.log"
    if not log.exists():
        log.write_text("[2026-12-02T00:00:00.000] slurmd version 22.05.8 started\n")
    return {"SLURMKIT_CONFIG": str(tmp_path / "slurmkit.yaml"), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN / scenario),
            "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1", "SLURMKIT_PYTHON": sys.executable,
            "SLURMKIT_AGENT_SOCKET": "none",
            "SLURM_CONF": str(conf), "SLURMKIT_SYSLOG_SOCKET": str(syslog_path), "SLURM_JOB_EXIT_CODE": "0"}


# nvidia-smi that fails (quietly): a fault every run finds again (an Xid is new to a node only once)
@pytest.mark.parametrize("scenario, code", [("healthy-h100x8", 0), ("nvsmi-fails-quietly", 1)])
def test_a_health_log_that_cannot_be_written_is_said_every_time_and_the_verdict_stands(
        tmp_path, broken_log, syslog_sock, scenario, code):
    kind, _ = broken_log
    write_site_config(tmp_path, efficiency=False)
    path, srv = syslog_sock
    msgs: list[str] = []
    for n, job in enumerate((101, 102), 1):
        r = subprocess.run([str(REPO / "prolog" / "prolog")], env=_env(tmp_path, job, scenario, path),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == code, (kind, r.stderr)
        # every run, in slurmd's log (slurmd itself logs nothing of a hook that exits 0) and in syslog
        slurmd_log = (tmp_path / "slurmd-n1.log").read_text().splitlines()
        said = [ln for ln in slurmd_log if "] error: slurmkit prolog: " in ln and "cannot write the health log" in ln]
        assert len(said) == n and f"job {job}:" in said[-1], slurmd_log
        msgs += received(srv)
        assert len([m for m in msgs if m.startswith("<27>") and f"job {job}: cannot write the health log" in m]) == 1
        line = f"slurmkit prolog: node n1 job {job}: cannot write the health log {tmp_path}/health/"
        assert line in r.stderr, r.stderr
        assert "(the verdict stands: " + ("healthy)" if code == 0 else "unhealthy") in r.stderr, r.stderr
    # the epilog too (a healthy node's epilog exits 0 either way: the drain is off in this config)
    r = subprocess.run([str(REPO / "epilog" / "epilog")], env=_env(tmp_path, 103, scenario, path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "slurmkit epilog: node n1 job 103: cannot write the health log" in r.stderr
    assert [m for m in received(srv) if "slurmkit epilog: node n1 job 103" in m]
    assert "slurmkit epilog: node n1 job 103: cannot write" in (tmp_path / "slurmd-n1.log").read_text()
