#!/usr/bin/env python3
"""Benchmark: a healthy node's periodic health run (slurmkit health, as slurmd's HealthCheckProgram runs it)
against the prolog on the same node, side by side in one run (interleaved, so machine noise hits both alike).

    .venv/bin/python bench/bench_health.py [--runs 20] [--dir /tmp/sk-bench-health] [--port 7187] [--no-sweep]

Starts a 1-node dev cluster of its own (stub hooks: slurmd does not run them; this script does), with fake GPU
tools replaying the healthy-h100x8 scenario. The health run does what the prolog does plus one question to the
controller (the node's state, to know which checks may run). Target: the health run within 1.5x of the prolog.

Then the sweep (issue 14): a 4-node dev cluster of its own (the repo's hooks, port +10), each node's `dcgmi diag`
SYNTHETICALLY slow (6, 7, 8, 9 s: a level-1 diagnostic takes ~10 s on real GPUs; the replayed output is the healthy
scenario's). First each node's heavy check alone, as its sweep job runs it (`slurmkit health --run-heavy --checks
dcgm --node nX`), one after another; then `slurmkit health --sweep gpu --checks dcgm`, from the submission until
every sweep job has left the queue. Target: the sweep within 2x the slowest single node's heavy check.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
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
    ap.add_argument("--no-sweep", action="store_true", help="only the periodic run against the prolog")
    a = ap.parse_args()
    periodic(a)
    if not a.no_sweep:
        sweep(a)


def periodic(a) -> None:
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


DIAG_SECONDS = {"n1": 6, "n2": 7, "n3": 8, "n4": 9}


def slow_scenario(d: Path, seconds: int) -> Path:
    """The healthy-h100x8 scenario with `dcgmi diag` answering after `seconds` (SYNTHETIC timing)."""
    src = REPO / "dev" / "fakegpu" / "scenarios" / "healthy-h100x8"
    out = d / f"slow-dcgm-{seconds}s"
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "responses" and not (out / f.name).exists():
            (out / f.name).symlink_to(f)
    rules = (src / "responses").read_text().replace("dcgmi\tdiag *\tdcgmi-diag.txt",
                                                    f"dcgmi\tdiag *\t@slow:{seconds}:dcgmi-diag.txt")
    assert "@slow:" in rules, "the healthy scenario's dcgmi rule changed"
    (out / "responses").write_text(rules)
    return out


def sweep(a) -> None:
    d = Path(f"{a.dir}-sweep")
    dev = [str(PY), str(REPO / "dev" / "cluster.py"), "--dir", str(d)]
    subprocess.run([*dev, "down"], capture_output=True, timeout=120)
    r = subprocess.run([*dev, "up", "--nodes", "4", "--port", str(a.port + 10)], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"cluster did not start: {r.stderr[-1500:]}")
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"), SLURMKIT_CONFIG=str(d / "slurmkit.yaml"),
               SLURMKIT_FAKEGPU_DIR=str(d / "fakegpu"))
    sk = [str(REPO / ".venv" / "bin" / "slurmkit"), "--config", str(d / "slurmkit.yaml")]
    try:
        for node, sec in DIAG_SECONDS.items():
            subprocess.run([*dev, "scenario", node, str(slow_scenario(d / "scen", sec))], check=True, timeout=60)
        single = {}
        for node in DIAG_SECONDS:
            single[node] = timed([*sk, "health", "--run-heavy", "--checks", "dcgm", "--node", node],
                                 dict(env, SLURMKIT_FAKE_NODE=node, SLURMD_NODENAME=node))
        t0 = time.monotonic()
        out = subprocess.run([*sk, "health", "--sweep", "gpu", "--checks", "dcgm", "--json"], capture_output=True,
                             text=True, timeout=120, env=env)
        if out.returncode != 0:
            raise SystemExit(f"sweep failed: {out.stderr[-1500:]}")
        import json
        ids = [str(j["job_id"]) for j in json.loads(out.stdout)["jobs"]]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            q = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"], capture_output=True, text=True,
                               timeout=30, env=env)
            if q.returncode == 0 and not q.stdout.strip():
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"sweep jobs {ids} still queued after 300 s")
        swept = time.monotonic() - t0
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30,
                                env=env).stdout.split()
    finally:
        subprocess.run([*dev, "down"], capture_output=True, timeout=120)
    slowest = max(single.values())
    print(f"sweep of the 4-node dev partition (dcgm, SYNTHETIC diag times {sorted(DIAG_SECONDS.values())} s):")
    for node, t in single.items():
        print(f"  {node} heavy check alone (--run-heavy)  {t:6.2f} s")
    print(f"  sweep, submit -> every job done       {swept:6.2f} s   nodes after: {' '.join(states)}")
    ratio = swept / slowest
    print(f"ratio sweep/slowest single: {ratio:.2f}x (target <= 2x): {'met' if ratio <= 2 else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
