#!/usr/bin/env python3
"""`slurmkit submit`'s time, this tree against another git revision, in the same run (interleaved), as a ratio:

    .venv/bin/python bench/bench_submit_ab.py [--base main] [--rounds 15]     # needs $SLURM_CONF (a dev cluster)

Both submit bench_submit.py's spec (held, one GPU) through the real CLI (`slurmkit.cli:main` from `python -I`)
to the same cluster, with only the slurmkit source and templates differing: the base revision's `slurmkit/` and
`templates/` are exported with `git archive` into a temporary directory. Two cases: the same spec again (the
render cache answers) and a new spec each time (`--set env.BENCH_RUN=i`: Jinja renders). Jobs are cancelled at
the end (`scancel --name bench`).
"""
from __future__ import annotations

import argparse
import itertools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = REPO / ".venv" / "bin" / "python"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_submit import SPEC  # noqa: E402

RUN = "import sys; sys.path.insert(0, sys.argv.pop(1)); from slurmkit.cli import main; sys.argv[0] = 'slurmkit'; main()"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("no SLURM_CONF: start a dev cluster (dev/cluster.py up) and source its env.sh")
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-submit-ab-"))
    base = tmp / "base"
    base.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", args.base, "slurmkit", "templates"], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=arch, check=True)
    spec = tmp / "job.yaml"
    spec.write_text(SPEC)
    trees = {"base": str(base), "this": str(REPO)}
    # each tree its own cache home: one tree's cached script is never the other's hit
    envs = {k: dict(os.environ, XDG_CACHE_HOME=str(tmp / f"cache-{k}")) for k in trees}
    counter = itertools.count()

    def cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    def timed(k: str, *extra: str) -> tuple[float, float]:
        """(wall, CPU) seconds of one submission: CPU time (user + system of the reaped child) is what the
        change costs; wall time also holds the waits for a loaded machine's CPUs and slurmctld."""
        c0, t0 = cpu(), time.perf_counter()
        r = subprocess.run([str(PY), "-I", "-c", RUN, trees[k], "submit", str(spec), *extra], env=envs[k],
                           capture_output=True, text=True, timeout=120)
        dt, dc = time.perf_counter() - t0, cpu() - c0
        if r.returncode != 0:
            raise SystemExit(f"{k}: slurmkit submit failed ({r.returncode}): {r.stderr.strip()[-500:]}")
        return dt, dc

    cases = {"same spec (render cache)": lambda k: timed(k),
             "new spec each time": lambda k: timed(k, "--set", f"env.BENCH_RUN={next(counter)}")}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {(c, k): [] for c in cases for k in trees}
    try:
        for i in range(args.rounds + 1):
            for c, f in cases.items():
                for k in trees:
                    dt = f(k)
                    if i:                     # round 0 warms the page cache, munge and the render caches
                        times[(c, k)].append(dt)
    finally:
        subprocess.run(["scancel", "--name", "bench"], capture_output=True)
    load = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
    print(f"slurmkit submit, median of {args.rounds} interleaved rounds (load average {load} on "
          f"{os.cpu_count()} CPUs): base = {args.base}")
    for c in cases:
        for j, what in ((0, "wall"), (1, "CPU ")):
            b, t = (statistics.median(x[j] for x in times[(c, k)]) * 1000 for k in ("base", "this"))
            print(f"  {c:28} {what} base {b:7.1f} ms   this tree {t:7.1f} ms   ratio this/base {t / b:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
