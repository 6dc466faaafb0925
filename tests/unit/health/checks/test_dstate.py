"""dstate: processes stuck in D state holding a GPU device. The collector reads the real /proc of this machine (a
child holding a real character device open, asleep: state S, seen and not a finding) and SYNTHETIC proc trees (a
directory per pid with a stat line and fd links) for the D state, which no test can put a real process into on
purpose."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.health.checks import dstate
from slurmkit.health.runner import run_checks

from sitesettings import make_settings


def _proc(root: Path, pid: int, state: str, comm: str, fds: list[str], start: int = 4242) -> None:
    """SYNTHETIC: one process of a proc tree: /proc/PID/stat in the kernel's layout, fd/N links to `fds`."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    rest = " ".join(["1"] * 18)  # fields 4..21
    (d / "stat").write_text(f"{pid} ({comm}) {state} {rest} {start} 100 200\n")
    for i, target in enumerate(fds):
        os.symlink(target, d / "fd" / str(i))


def _settings(root: Path, confirm: float = 0.0, devices=("/dev/nvidia",)):
    s = make_settings()
    s.dstate.proc = str(root)
    s.dstate.devices = list(devices)
    s.dstate.confirm_seconds = confirm
    return s


def _run(s):
    (r,) = run_checks(s, "full", subset=["dstate"]).results
    return r


def test_synthetic_a_process_in_d_state_on_a_gpu_fails_naming_it(tmp_path):
    _proc(tmp_path, 100, "S", "python", ["/dev/nvidia0", "/dev/nvidiactl"])    # a healthy job's process
    _proc(tmp_path, 200, "D", "python (rank 3)", ["/dev/nvidia3", "/dev/nvidiactl", "/tmp/x"])
    _proc(tmp_path, 300, "D", "jbd2/sda1-8", ["/dev/sda1"])                     # D on a disk: not this check's
    r = _run(_settings(tmp_path))
    assert r.status == "fail" and r.code == "dstate"
    assert r.reason == ("1 process(es) stuck in D state holding a GPU: pid 200 (python (rank 3)) on /dev/nvidia3, "
                        "/dev/nvidiactl")
    assert r.evidence["processes_read"] == 3


def test_synthetic_a_d_state_that_passes_is_not_stuck(tmp_path):
    _proc(tmp_path, 200, "D", "python", ["/dev/nvidia3"])
    first, n = dstate.scan(str(tmp_path), ["/dev/nvidia"])
    assert [p["pid"] for p in first] == [200] and n == 1
    (tmp_path / "200" / "stat").write_text((tmp_path / "200" / "stat").read_text().replace(" D ", " S "))
    assert dstate.confirm(str(tmp_path), first) == []
    # a new process under the same pid (another start time) is not the one seen
    (tmp_path / "200" / "stat").write_text((tmp_path / "200" / "stat").read_text().replace(" S ", " D ")
                                            .replace(" 4242 ", " 9999 "))
    assert dstate.confirm(str(tmp_path), first) == []


def test_the_real_proc_is_read_and_a_sleeping_holder_of_a_device_is_not_a_finding(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root (CI and the dev machines run as root)")
    dev = tmp_path / "nvidia0"
    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))        # a real character device (as /dev/null's numbers)
    child = subprocess.Popen([sys.executable, "-c", f"f = open({str(dev)!r}); import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while True:
            fds = [os.readlink(f"/proc/{child.pid}/fd/{n}") for n in os.listdir(f"/proc/{child.pid}/fd")]
            if str(dev) in fds or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert str(dev) in fds
        s = _settings(Path("/proc"), devices=(str(tmp_path / "nvidia"),))
        r = _run(s)
        assert r.status == "ok" and r.evidence["processes_read"] > 1, r.reason
        assert dstate._devices("/proc", str(child.pid), [str(tmp_path / "nvidia")]) == [str(dev)]
    finally:
        child.kill()
        child.wait()


def test_no_proc_filesystem_is_unreadable_and_a_capture_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not a proc filesystem"):
        dstate.evaluate(*dstate.scan(str(tmp_path / "empty"), ["/dev/nvidia"]), _settings(tmp_path / "empty").dstate)
    r = _run(_settings(tmp_path / "missing"))
    assert r.status == "skip" and "cannot read" in r.reason
    with pytest.raises(UsageError, match="no capture format"):
        run_checks(make_settings(), "full", captures={"dstate": "anything"})


def test_the_settings_are_validated_with_their_line():
    with pytest.raises(UsageError) as e:
        make_settings("dstate:\n  confirm_seconds: 600\n")
    assert e.value.path == "site.yaml" and e.value.line == 2
