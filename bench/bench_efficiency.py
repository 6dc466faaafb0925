#!/usr/bin/env python3
"""Benchmark the per-job GPU sampler (issue 15). One command, ratios measured side by side in the same run:

    .venv/bin/python bench/bench_efficiency.py [--speedup 50] [--seconds 20] [--jobs 30] [--dir /tmp/sk-eff-bench]
                                               [--port 7650] [--skip-cluster]

(a) CPU cost per node-hour: the sampler (python + its one `nvidia-smi --query-gpu ... -lms` child, 8 GPUs, with
    its watchdog) beside `nvidia-smi -l 10` alone, both replaying the same fake series at the same accelerated
    interval (10 s / speedup) for the same number of ticks; CPU seconds (user+sys of the whole process tree, from
    wait4) scaled to one hour of 10 s samples. Interleaved rounds; medians.
(b) N short GPU jobs on a dev cluster with the slurmkit prolog+epilog, efficiency.enabled true vs false (same
    cluster, the site config flipped between rounds): throughput ratio.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = REPO / ".venv" / "bin" / "python"
SMI = REPO / "dev" / "fakegpu" / "bin" / "nvidia-smi"
SCEN = REPO / "dev" / "fakegpu" / "scenarios" / "eff-busy"
FIELDS = "index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,power.limit"


def cpu_of(argv, seconds: float, env, *, term=signal.SIGTERM) -> float:
    """CPU seconds (user + sys) of argv and every descendant it reaped, run for `seconds` then stopped."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(seconds)
    try:
        os.killpg(p.pid, term) if term == signal.SIGKILL else os.kill(p.pid, term)
    except ProcessLookupError:
        pass
    _, status, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime


def part_a(speedup: float, seconds: float, rounds: int) -> dict:
    interval = 10.0 / speedup
    ticks = seconds / interval
    env = dict(os.environ, SLURMKIT_FAKEGPU_SCENARIO=str(SCEN))
    tmp = Path("/tmp/sk-eff-bench-a")
    tmp.mkdir(exist_ok=True)
    # the watchdog of a real job watches a slurmstepd in the real /proc: a stand-in with that process title
    stepd = subprocess.Popen(["bash", "-c", 'exec -a "slurmstepd: [999999.batch]" sleep 100000'])
    sampler = [str(PY), "-I", "-m", "slurmkit.efficiency.sampler", "--job", "999999", "--gpus", "0,1,2,3,4,5,6,7",
               "--out", str(tmp / "samples"), "--interval", str(interval), "--tool", str(SMI),
               "--backend", "nvidia-smi", "--watchdog", str(5.0 / speedup)]
    smi = [str(SMI), f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", str(int(interval * 1000))]
    per_hour = 3600.0 / 10.0 / ticks       # hour-equivalents of 10 s samples in one run
    a, b = [], []
    try:
        for _ in range(rounds):
            a.append(cpu_of(sampler, seconds, env) * per_hour)
            b.append(cpu_of(smi, seconds, env, term=signal.SIGKILL) * per_hour)
    finally:
        stepd.kill()
        stepd.wait()
    size = (tmp / "samples").stat().st_size
    return {"sampler_cpu_s_per_hour": statistics.median(a), "smi_cpu_s_per_hour": statistics.median(b),
            "ticks": ticks, "interval": interval, "samples_bytes_per_hour": size / ticks * 360}


def sh(*argv, env=None, timeout=120, check=True):
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=check)


def set_enabled(cfg: Path, on: bool) -> None:
    text = cfg.read_text()
    text = re.sub(r"\nefficiency:.*\n(  .*\n)*", "\n", text)      # the dev cluster's own block, comments and all
    text += "efficiency:\n  interval: 0.5\n  watchdog_interval: 0.5\n" + ("" if on else "  enabled: false\n")
    cfg.write_text(text)


def run_jobs(env, n: int) -> float:
    t0 = time.perf_counter()
    ids = [sh("sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true", env=env).stdout.strip()
           for _ in range(n)]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        out = sh("squeue", "-h", "-j", ",".join(ids), "-o", "%i", env=env, check=False).stdout.split()
        if not out:
            break
        if "drain" in sh("sinfo", "-h", "-o", "%T", env=env).stdout:
            raise SystemExit("a node drained during the benchmark: " + sh("sinfo", "-R", env=env).stdout)
        time.sleep(0.2)
    # the last epilogs: the node leaves COMPLETING
    while time.monotonic() < deadline and "comp" in sh("sinfo", "-h", "-o", "%T", env=env).stdout:
        time.sleep(0.2)
    return time.perf_counter() - t0


def part_b(d: Path, port: int, jobs: int, rounds: int) -> dict:
    sh(str(PY), str(REPO / "dev" / "cluster.py"), "--dir", str(d), "down", check=False)
    r = sh(str(PY), str(REPO / "dev" / "cluster.py"), "--dir", str(d), "up", "--port", str(port), "--nodes", "2",
           "--default-scenario", "eff-busy", timeout=300, check=False)
    if r.returncode:
        raise SystemExit(f"cluster up failed: {r.stderr[-2000:]}")
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
    cfg = d / "slurmkit.yaml"
    on, off = [], []
    try:
        for _ in range(rounds):
            for enabled, acc in ((True, on), (False, off)):
                set_enabled(cfg, enabled)
                acc.append(jobs / run_jobs(env, jobs))
        log = d / "slurmkit" / "efficiency.jsonl"
        n_rec = len(log.read_text().splitlines()) if log.exists() else 0
    finally:
        sh(str(PY), str(REPO / "dev" / "cluster.py"), "--dir", str(d), "down", check=False)
    return {"jobs_per_s_with": statistics.median(on), "jobs_per_s_without": statistics.median(off),
            "records": n_rec, "expected_records": jobs * rounds}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speedup", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sk-eff-bench"))
    ap.add_argument("--port", type=int, default=7650)
    ap.add_argument("--skip-cluster", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    a = ap.parse_args()
    if not a.skip_cpu:
        report_a(a, part_a(a.speedup, a.seconds, a.rounds))
    if a.skip_cluster:
        return 0
    rb = part_b(a.dir, a.port, a.jobs, a.rounds)
    report_b(a, rb)
    return 0


def report_a(a, ra) -> None:
    print(f"(a) CPU per node-hour of 10 s samples, 8 GPUs ({ra['ticks']:.0f} ticks at {ra['interval']:g} s = "
          f"{ra['ticks'] * 10 / 3600:.2f} h-equivalent per run, {a.rounds} rounds, medians)")
    print(f"    slurmkit sampler (python + one nvidia-smi -lms child, watchdog): "
          f"{ra['sampler_cpu_s_per_hour']:.2f} CPU-s/h")
    print(f"    nvidia-smi -l 10 alone (same fake replay):                      {ra['smi_cpu_s_per_hour']:.2f} CPU-s/h")
    print(f"    ratio sampler / nvidia-smi: {ra['sampler_cpu_s_per_hour'] / ra['smi_cpu_s_per_hour']:.2f}x;"
          f" sampler overhead beyond its child: "
          f"{ra['sampler_cpu_s_per_hour'] - ra['smi_cpu_s_per_hour']:.2f} CPU-s/h "
          f"({(ra['sampler_cpu_s_per_hour'] - ra['smi_cpu_s_per_hour']) / 36:.3f} % of one core)")
    print(f"    sample file: {ra['samples_bytes_per_hour'] / 1024:.0f} KiB per hour (bounded by efficiency.samples_max_bytes)")


def report_b(a, rb) -> None:
    print(f"(b) {a.jobs} one-GPU `true` jobs on a 2-node dev cluster, slurmkit prolog+epilog, {a.rounds} rounds each, "
          "medians")
    print(f"    efficiency on:  {rb['jobs_per_s_with']:.2f} jobs/s ({rb['records']} records for "
          f"{rb['expected_records']} jobs)")
    print(f"    efficiency off: {rb['jobs_per_s_without']:.2f} jobs/s")
    print(f"    ratio on / off: {rb['jobs_per_s_with'] / rb['jobs_per_s_without']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
