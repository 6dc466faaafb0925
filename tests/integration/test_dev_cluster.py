"""dev/cluster.py itself, on the Slurm version under test: `down` stops every daemon it started, also after
`scontrol reconfigure`, which on 24.11+ restarts slurmctld and every slurmd under new pids."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
from cluster import pid_alive as alive  # noqa: E402  (dev/cluster.py: a zombie is not alive)

PORT = int(os.environ.get("SLURMKIT_DEV_PORT", "6917")) + 10      # +5/+6 are test_topo_gres's


def pidfiles(d: Path) -> dict[str, int]:
    out = {}
    for f in (d / "run").glob("*.pid"):
        try:
            out[f.stem] = int(f.read_text().strip())
        except ValueError:
            pass
    return out


@pytest.mark.compat("dev cluster")
def test_down_stops_every_daemon_also_after_a_reconfigure(cluster, tmp_path):
    d = tmp_path / "c"
    dev = [sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(d)]
    up = subprocess.run([*dev, "up", "--slurm", cluster.slurm, "--port", str(PORT), "--nodes", "2", "--gpus", "1",
                         "--hooks", "true"], capture_output=True, text=True, timeout=300)
    seen: set[int] = set()
    try:
        assert up.returncode == 0, up.stderr
        assert (d / "cluster.json").read_text().strip() == json.dumps({"slurm": cluster.slurm})
        before = json.loads((d / "pids.json").read_text())
        seen |= set(before.values())
        env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
        subprocess.run(["scontrol", "reconfigure"], env=env, check=True, timeout=60, capture_output=True)
        # the daemons answer again (under new pids on 24.11+)
        deadline = time.monotonic() + 90
        states = ""
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True,
                               timeout=30)
            states = r.stdout
            # ... and have written their pid files (a restarted slurmctld answers before it writes its own)
            if r.returncode == 0 and states.split().count("idle") == 2 and "slurmctld" in pidfiles(d):
                break
            time.sleep(1)
        assert states.split().count("idle") == 2, states
        now = pidfiles(d)
        seen |= set(now.values())
        assert all(alive(p) for p in now.values()), now
        if cluster.slurm != "22.05":          # measured: 24.11 and 26.05 restart, 22.05 re-reads in place
            assert now["slurmctld"] != before["slurmctld"]
    finally:
        down = subprocess.run([*dev, "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(p) for p in seen):
        time.sleep(0.2)
    assert not [p for p in seen if alive(p)]
