#!/usr/bin/env python3
"""How long a submission takes, side by side in one run on the dev cluster:

  sbatch     `sbatch --parsable job.sh` of the script slurmkit renders (the floor)
  slurmkit   `slurmkit submit job.yaml`: interpreter and CLI start-up, spec, template, the cluster check
             (sinfo), sbatch; the same spec again (render cache hit: no Jinja), a new spec each time
             (`--set env.BENCH_RUN=i`: Jinja imported, compiled templates from the bytecode cache), with
             SLURMKIT_NO_CACHE=1 (nothing cached: the very first submission), and with --no-check
  submitit   `submitit.SlurmExecutor.submit(fn)` for an equivalent job (what Python users pick today): a fresh
             Python process that imports submitit and submits (comparable to a CLI call), and the submit call
             alone inside an already running Python; skipped with a message when submitit is not installed
             (`pip install 'slurmkit[bench]'`)

Jobs are submitted held (--hold) so they do not load the machine, and cancelled at the end. Rounds are
interleaved (the machine is shared and noisy); medians and ratios are printed.

    python bench/bench_submit.py [--rounds 15]      # uses the cluster in $SLURM_CONF, else starts its own
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = """name: bench
partition: gpu
gpus_per_node: 1
cpus_per_gpu: 2
time: "10:00"
command: [true]
sbatch: [--hold]
"""


SUBMITIT_FRESH = """import submitit
ex = submitit.SlurmExecutor(folder="{folder}")
ex.update_parameters(partition="gpu", gpus_per_node=1, cpus_per_task=2, time=10, job_name="submitit",
                     additional_parameters={{"hold": True}})
ex.submit(int)
"""


def _noop():
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dir", default="/tmp/slurmkit-bench", help="cluster dir when starting one")
    ap.add_argument("--port", type=int, default=6967, help="cluster port when starting one")
    a = ap.parse_args()

    started = False
    if not os.environ.get("SLURM_CONF"):
        py = sys.executable
        subprocess.run([py, str(REPO / "dev" / "cluster.py"), "--dir", a.dir, "up", "--port", str(a.port)],
                       check=True)
        os.environ["SLURM_CONF"] = f"{a.dir}/slurm.conf"
        os.environ["SLURMKIT_CONFIG"] = f"{a.dir}/slurmkit.yaml"
        started = True
    try:
        return run(a)
    finally:
        subprocess.run(["scancel", "--name", "bench"], capture_output=True)
        subprocess.run(["scancel", "--name", "submitit"], capture_output=True)
        if started:
            subprocess.run([sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", a.dir, "down"])


def run(a) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-submit-"))
    try:
        return _run(a, tmp)
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


def _run(a, tmp: Path) -> int:
    sk = str(Path(sys.executable).with_name("slurmkit"))
    spec = tmp / "job.yaml"
    spec.write_text(SPEC)
    script = tmp / "job.sh"
    r = subprocess.run([sk, "render", str(spec)], capture_output=True, text=True, check=True)
    script.write_text(r.stdout)
    env = dict(os.environ)

    try:
        import submitit
        ex = submitit.SlurmExecutor(folder=str(tmp / "submitit"))
        ex.update_parameters(partition="gpu", gpus_per_node=1, cpus_per_task=2, time=10, job_name="submitit",
                             additional_parameters={"hold": True})
    except ImportError:
        ex = None
        print("submitit is not installed: skipping it (pip install 'slurmkit[bench]')", file=sys.stderr)

    cold = dict(env, SLURMKIT_NO_CACHE="1")
    counter = itertools.count()

    def timed(argv, e=env):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=e)
        return time.perf_counter() - t

    cases = {
        "sbatch (pre-rendered script)": lambda: timed(["sbatch", "--parsable", str(script)]),
        "python -c pass (start-up only)": lambda: timed([sys.executable, "-c", "pass"]),
        "slurmkit submit": lambda: timed([sk, "submit", str(spec)]),
        "slurmkit submit, new spec": lambda: timed([sk, "submit", str(spec), "--set",
                                                    f"env.BENCH_RUN={next(counter)}"]),
        "slurmkit submit, no cache": lambda: timed([sk, "submit", str(spec)], cold),
        "slurmkit submit --no-check": lambda: timed([sk, "submit", "--no-check", str(spec)]),
    }
    if ex is not None:
        fresh = tmp / "submitit_fresh.py"
        fresh.write_text(SUBMITIT_FRESH.format(folder=tmp / "submitit"))
        cases["submitit, fresh python process"] = lambda: timed([sys.executable, str(fresh)])

        def sub():
            t = time.perf_counter()
            ex.submit(_noop)
            return time.perf_counter() - t
        cases["submitit, inside running python"] = sub
    for f in cases.values():   # warm-up: page cache, munge, slurmctld
        f()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(a.rounds):
        for k, f in cases.items():
            times[k].append(f())
    load = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
    print(f"{a.rounds} interleaved rounds, ms: median (min-max); held jobs on {os.environ['SLURM_CONF']}; "
          f"load average {load} on {os.cpu_count()} CPUs")
    for k, v in times.items():
        print(f"  {k:32s} {statistics.median(v) * 1000:7.1f}  ({min(v) * 1000:.1f}-{max(v) * 1000:.1f})")
    # the median says what a user waits on this machine now; the minimum is the closest to an idle machine
    for label, agg in (("median", statistics.median), ("min", min)):
        m = {k: agg(v) * 1000 for k, v in times.items()}
        floor = m["sbatch (pre-rendered script)"]
        s = m["slurmkit submit"]
        line = (f"{label:6s}: slurmkit submit - sbatch {s - floor:+.1f} ms (target <= +100; render cache hit), "
                f"new spec {m['slurmkit submit, new spec'] - floor:+.1f} ms, "
                f"no cache {m['slurmkit submit, no cache'] - floor:+.1f} ms, --no-check "
                f"{m['slurmkit submit --no-check'] - floor:+.1f} ms; interpreter start-up "
                f"{m['python -c pass (start-up only)']:.1f} ms")
        if ex is not None:
            sub = m["submitit, fresh python process"]
            line += (f"; submitit (fresh process) / slurmkit {sub / s:.2f}x, / new spec "
                     f"{sub / m['slurmkit submit, new spec']:.2f}x, / no cache "
                     f"{sub / m['slurmkit submit, no cache']:.2f}x")
        print(line)
    if ex is not None:
        print("submitit inside an already running Python pays no start-up: the cost of one more job from a notebook "
              "or driver script")
    return 0


if __name__ == "__main__":
    sys.exit(main())
