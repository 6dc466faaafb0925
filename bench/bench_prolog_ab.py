#!/usr/bin/env python3
"""The prolog's start, this tree against another git revision, in the same run (interleaved), as a ratio:

    .venv/bin/python bench/bench_prolog_ab.py [--base main] [--runs 40]

Both run the real prolog entry point (slurmkit.hooks.prolog, a warm settings cache, fake GPU tools of the
healthy-h100x8 scenario, as bench_prolog.py part (a) does) from `python -I`, with only the slurmkit source tree
differing: the base revision is exported with `git archive` into a temporary directory.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = REPO / ".venv" / "bin" / "python"
FAKE = REPO / "dev" / "fakegpu" / "bin"
SCEN = REPO / "dev" / "fakegpu" / "scenarios" / "healthy-h100x8"
RUN = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); sys.argv = ['prolog']\n"
       "try:\n    runpy.run_module('slurmkit.hooks.prolog', run_name='__main__')\n"
       "except SystemExit as e:\n    sys.exit(e.code)\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="main")
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-ab-"))
    base = tmp / "base"
    base.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", args.base, "slurmkit"], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=arch, check=True)
    cfg = tmp / "slurmkit.yaml"
    cfg.write_text(f"tools:\n  nvidia_smi: {FAKE}/nvidia-smi\n  dmesg: {FAKE}/dmesg\n"
                   f"  all_reduce_perf: {FAKE}/all_reduce_perf\npaths:\n  state_dir: {tmp}/state\n"
                   f"  health_log: {tmp}/health.jsonl\ngpu_count:\n  expected: 8\n"
                   "driver:\n  driver_versions: [\"550.54.15\"]\nhealth:\n  drain: false\n")
    trees = {"base": str(base), "this": str(REPO)}
    envs = {k: {"SLURMKIT_CONFIG": str(cfg), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN), "SLURMD_NODENAME": "n1",
                "SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1",
                "CUDA_VISIBLE_DEVICES": "0,1", "SLURMKIT_HOOK_CACHE_DIR": str(tmp / f"cache-{k}"),
                "PATH": "/usr/bin:/bin"} for k in trees}
    def cpu() -> float:       # user + system seconds of the reaped children: what a loaded machine's waits leave out
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    times: dict[str, list[float]] = {k: [] for k in trees}
    cpus: dict[str, list[float]] = {k: [] for k in trees}
    for i in range(args.runs + 2):
        for k, tree in trees.items():
            c0, t0 = cpu(), time.perf_counter()
            r = subprocess.run([str(PY), "-I", "-c", RUN, tree], env=envs[k], capture_output=True, text=True,
                               timeout=120)
            dt, dc = time.perf_counter() - t0, cpu() - c0
            if r.returncode != 0:
                raise SystemExit(f"{k} prolog failed ({r.returncode}): {r.stderr.strip()[-500:]}")
            if i >= 2:        # the first runs warm the page cache and write the settings cache
                times[k].append(dt)
                cpus[k].append(dc)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"prolog start, median of {args.runs} interleaved runs: base ({args.base}) {med['base']:.1f} ms, "
          f"this tree {med['this']:.1f} ms, ratio this/base {med['this'] / med['base']:.3f}")
    med = {k: statistics.median(v) * 1000 for k, v in cpus.items()}
    print(f"prolog CPU (user+system), median: base {med['base']:.1f} ms, this tree {med['this']:.1f} ms, "
          f"ratio this/base {med['this'] / med['base']:.3f}")


if __name__ == "__main__":
    main()
