"""A healthy node's site config for tests that run the real prolog/epilog scripts: the fake GPU tools (replaying
dev/fakegpu captures), state and health log under one directory, no drains (no Slurm here), fast efficiency samples."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "dev" / "fakegpu" / "bin"


def write_site_config(d: Path, *, efficiency: bool = True, sync: bool = False) -> Path:
    cfg = d / "slurmkit.yaml"
    sync_lines = (f"""sync:
  enabled: true
  source: {d}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {d}/shared/$SLURM_JOB_USER
""" if sync else "")
    cfg.write_text(f"""tools:
  nvidia_smi: {FAKE}/nvidia-smi
  dmesg: {FAKE}/dmesg
  all_reduce_perf: {FAKE}/all_reduce_perf
  dcgmi: {FAKE}/dcgmi
paths:
  state_dir: {d}/state
  health_log: {d}/health/
gpu_count:
  expected: 8
driver:
  driver_versions: ["550.54.15"]
health:
  drain: false
{sync_lines}efficiency:
  enabled: {"true" if efficiency else "false"}
  interval: 0.5
  watchdog_interval: 0.5
  start_grace: 30
""")
    return cfg


def sampler_argv(pid: int, timeout: float = 10.0) -> list[bytes]:
    """The command line of a forked efficiency sampler once it shows as one: it writes its title itself, right
    after the fork, so a reader straight after the prolog may see its parent's for a moment."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"slurmkit.efficiency.sampler" in argv or time.monotonic() > deadline:
            return argv
        time.sleep(0.05)
