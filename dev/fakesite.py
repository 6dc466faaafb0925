"""A healthy fake node's site config, for what runs the real prolog/epilog outside a cluster (bench/bench_prolog.py,
bench/bench_hook_cpu.py, tests/unit/hooksite.py): the fake GPU tools (replaying dev/fakegpu captures), state and
health log under one directory, no drains (no Slurm to drain in). Standard library only."""
from __future__ import annotations

from pathlib import Path

FAKE = Path(__file__).resolve().parent / "fakegpu" / "bin"


def write_site_config(d: Path, health_log: str = "health.jsonl", extra: str = "") -> Path:
    """d/slurmkit.yaml; `health_log` is relative to d (a trailing / makes it the per-day layout); `extra` is more
    YAML (whole sections) appended as written."""
    cfg = d / "slurmkit.yaml"
    cfg.write_text(f"""tools:
  nvidia_smi: {FAKE}/nvidia-smi
  dmesg: {FAKE}/dmesg
  all_reduce_perf: {FAKE}/all_reduce_perf
  dcgmi: {FAKE}/dcgmi
paths:
  state_dir: {d}/state
  health_log: {d}/{health_log}
gpu_count:
  expected: 8
driver:
  driver_versions: ["550.54.15"]
health:
  drain: false
{extra}""")
    return cfg
