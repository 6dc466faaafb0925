"""A healthy node's site config for tests that run the real prolog/epilog scripts: the fake GPU tools (replaying
dev/fakegpu captures), state and health log under one directory, no drains (no Slurm here), fast efficiency samples."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
import fakesite  # noqa: E402 - dev/fakesite.py, shared with the benchmarks


def write_site_config(d: Path, *, efficiency: bool = True, sync: bool = False) -> Path:
    """dev/fakesite.py's healthy node with a per-day health log, the efficiency sampler on (or off) at 0.5 s so
    samples come within a test, and (`sync`) the epilog's checkpoint sync from d/local to d/shared."""
    sync_lines = (f"""sync:
  enabled: true
  source: {d}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {d}/shared/$SLURM_JOB_USER
""" if sync else "")
    return fakesite.write_site_config(d, "health/", f"""{sync_lines}efficiency:
  enabled: {"true" if efficiency else "false"}
  interval: 0.5
  watchdog_interval: 0.5
  start_grace: 30
""")


def sampler_argv(pid: int, timeout: float = 10.0) -> list[bytes]:
    """The command line of the efficiency sampler once it shows as one: between its fork and its exec it reads as
    its parent's for a moment."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"slurmkit.efficiency.sampler" in argv or time.monotonic() > deadline:
            return argv
        time.sleep(0.05)
