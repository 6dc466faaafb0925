#!/usr/bin/env python3
"""Benchmark: a healthy node's periodic health run (slurmkit health, as slurmd's HealthCheckProgram runs it)
against the prolog on the same node, side by side in one run (interleaved, so machine noise hits both alike).

    .venv/bin/python bench/bench_health.py [--runs 20] [--dir /tmp/sk-bench-health] [--port 7187]

Starts a 1-node dev cluster of its own (stub hooks: slurmd does not run them; this script does), with fake GPU
tools replaying the healthy-h100x8 scenario. The health run does what the prolog does plus one question to the
controller (the node's state, to know which checks may run). Target: the health run within 1.5x of the prolog.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = REPO / ".venv" / "bin" / "python"
sys.path.insert(0, str(REPO / "bench"))
from bench_prolog import timed  # noqa: E402  (one timer for both benchmarks; bench/ is not a package)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sk-bench-health"))
    ap.add_argument("--port", type=int, default=7187)
    a = ap.parse_args()
    dev = [str(PY), str(REPO / "dev" / "cluster.py"), "--dir", str(a.dir)]
    subprocess.run([*dev, "down"], capture_output=True, timeout=120)
    r = subprocess.run([*dev, "up", "--nodes", "1", "--port", str(a.port), "--hooks", "true"], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"cluster did not start: {r.stderr[-1500:]}")
    try:
        base = {"SLURMKIT_CONFIG": str(a.dir / "slurmkit.yaml"), "SLURMKIT_FAKEGPU_DIR": str(a.dir / "fakegpu"),
                "SLURMD_NODENAME": "n1", "SLURM_CONF": str(a.dir / "slurm.conf"),
                "SLURMKIT_HOOK_CACHE_DIR": str(a.dir / "hookcache")}
        prolog_env = dict(base, SLURM_JOB_ID="1", SLURM_JOB_UID="0", SLURM_JOB_USER="root", SLURM_JOB_GPUS="0,1",
                          CUDA_VISIBLE_DEVICES="0,1")
        prolog = [str(REPO / "prolog" / "prolog")]
        health = [str(REPO / "health" / "health")]
        timed(prolog, prolog_env)
        timed(health, base)                               # warm the settings cache and the page cache
        tp, th = [], []
        for _ in range(a.runs):
            tp.append(timed(prolog, prolog_env))
            th.append(timed(health, base))
    finally:
        subprocess.run([*dev, "down"], capture_output=True, timeout=120)
    mp, mh = statistics.median(tp), statistics.median(th)
    print(f"cpus: {os.cpu_count()}, load: {os.getloadavg()[0]:.2f}, runs: {a.runs} (median)")
    print(f"prolog (healthy node, 2 GPUs)        {mp * 1000:8.1f} ms")
    print(f"health run (idle healthy node)       {mh * 1000:8.1f} ms")
    ratio = mh / mp
    print(f"ratio health/prolog: {ratio:.2f}x (target <= 1.5x): {'met' if ratio <= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
