#!/usr/bin/env python3
"""How long a submission takes, side by side in one run on the dev cluster, each figure with its target
(issue 27) and whether this run met it:

  sbatch                 `sbatch --parsable job.sh` of the script slurmkit renders (the floor)
  python -I -c pass      one interpreter start-up
  slurmkit submit (CLI)  `slurmkit submit job.yaml` again (start-up, spec, render, the cluster check, sbatch); also a
                         new spec each time (`--set env.BENCH_RUN=i`) and --no-check
                                                    target: no slower than submitit's fresh-process submit
  before (ef2521e)       the same two command lines through the console script of the tree before issue 27 (its
                         lean entry, submission and render caches), exported with `git archive` (--base REV)
  submitit fresh         a fresh Python process that imports submitit and submits an equivalent job
  submitit in-process    `SlurmExecutor.submit(fn)` inside this running Python (the Nth submit)
  slurmkit API Nth       `slurmkit.Client.submit(spec, env=...)` inside this running Python (the Nth submit, a new
                         value each time: cluster facts cached)         target: <= 1.5x submitit in-process
  nodes / audit          `slurmkit nodes --json`, `slurmkit audit --json` against the Slurm commands they run
                         (`sinfo --version` + the node listing), in start-ups (printed, no target)

submitit is an anchor, not optional: without it (`pip install 'slurmkit[bench]'`, which bench/run.sh does) this
benchmark fails. Jobs are submitted held (--hold) so they do not load the machine, and cancelled at the end.
Rounds are interleaved (the machine is shared and noisy); medians and minimums are printed.

    python bench/bench_submit.py [--rounds 15] [--base ef2521e]  # the cluster in $SLURM_CONF, else its own
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
BASE = "ef2521e"  # the last tree before issue 27 (lean entry, submission/render/settings caches)
# the console script of a tree exported to argv[1]: its lean entry where it has one, else its click CLI
BASE_RUN = ("import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'slurmkit'\n"
            "try:\n    from slurmkit.entry import main\nexcept ImportError:\n    from slurmkit.cli import main\nmain()\n")
SPEC = """name: bench
partition: gpu
gpus_per_node: 1
cpus_per_gpu: 2
time: "10:00"
command: [true]
output: /dev/null
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
    ap.add_argument("--base", default=BASE, help="the revision measured beside this tree ('' for none)")
    a = ap.parse_args()
    try:
        import submitit  # noqa: F401
    except ImportError:
        print("bench_submit: submitit is not installed, and it is this benchmark's anchor: "
              "pip install 'slurmkit[bench]' (bench/run.sh does)", file=sys.stderr)
        return 1

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


def _export(base: str, tmp: Path) -> Path | None:
    """slurmkit/ and templates/ of `base`, exported with git archive (None when no base is asked for)."""
    if not base:
        return None
    out = tmp / "base"
    out.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", base, "slurmkit", "templates"], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=arch, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(out / "slurmkit")], check=True, capture_output=True)
    return out


def _cases(tmp: Path, base: Path | None) -> dict:
    import submitit

    import slurmkit
    from slurmkit.slurm.cli_backend import CliBackend

    sk = str(Path(sys.executable).with_name("slurmkit"))
    spec = tmp / "job.yaml"
    spec.write_text(SPEC)
    script = tmp / "job.sh"
    script.write_text(subprocess.run([sk, "render", str(spec)], capture_output=True, text=True, check=True).stdout)
    node_argv, _ = CliBackend(timeout=30).node_source()
    counter = itertools.count()

    def timed(argv, env=None):
        def f():
            return in_process(lambda: subprocess.run(argv, check=True, capture_output=True, env=env))()
        return f

    def in_process(fn):
        def f():
            """(wall, CPU) seconds: CPU is this process's and its children's user+system time, which a loaded
            machine inflates far less than the wall time."""
            c0, t = _cpu(), time.perf_counter()
            fn()
            return time.perf_counter() - t, _cpu() - c0
        return f

    ex = submitit.SlurmExecutor(folder=str(tmp / "submitit"))
    ex.update_parameters(partition="gpu", gpus_per_node=1, cpus_per_task=2, time=10, job_name="submitit",
                         additional_parameters={"hold": True})
    fresh = tmp / "submitit_fresh.py"
    fresh.write_text(SUBMITIT_FRESH.format(folder=tmp / "submitit"))
    client = slurmkit.Client()

    def slurm_listing():
        subprocess.run(["sinfo", "--version"], check=True, capture_output=True)
        subprocess.run(node_argv, check=True, capture_output=True)

    return {
        "sbatch": timed(["sbatch", "--parsable", str(script)]),
        "python -I -c pass": timed([sys.executable, "-I", "-c", "pass"]),
        "slurmkit submit (CLI)": timed([sk, "submit", str(spec)]),
        "slurmkit submit, new spec": lambda: timed([sk, "submit", str(spec), "--set",
                                                    f"env.BENCH_RUN={next(counter)}"])(),
        "slurmkit submit --no-check": timed([sk, "submit", "--no-check", str(spec)]),
        **({
            "before: slurmkit submit (CLI)": timed([sys.executable, "-I", "-c", BASE_RUN, str(base), "submit",
                                                    str(spec)]),
            "before: slurmkit submit, new spec": lambda: timed([sys.executable, "-I", "-c", BASE_RUN, str(base),
                                                                "submit", str(spec), "--set",
                                                                f"env.BENCH_RUN={next(counter)}"])(),
        } if base else {}),
        "submitit, fresh process": timed([sys.executable, str(fresh)]),
        "submitit, in-process Nth": in_process(lambda: ex.submit(_noop)),
        "slurmkit API, in-process Nth": in_process(lambda: client.submit(spec, env={"BENCH_RUN": str(next(counter))})),
        "sinfo --version + " + " ".join(node_argv): in_process(slurm_listing),
        "slurmkit nodes --json": timed([sk, "nodes", "--json"]),
        "slurmkit audit --json": timed([sk, "audit", "--json"]),
    }


def _cpu() -> float:
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _run(a, tmp: Path) -> int:
    # what a wheel install has (pip compiles on install): slurmkit's own modules byte-compiled, so a run under
    # PYTHONDONTWRITEBYTECODE=1 (which an editable checkout may never have compiled) is not measuring the compiler
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "slurmkit")], check=True,
                   capture_output=True)
    cases = _cases(tmp, _export(a.base, tmp))
    for f in cases.values():   # warm-up: page cache, munge, slurmctld, the API's cached cluster facts
        f()
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(a.rounds):
        for k, f in cases.items():
            wall, c = f()
            times[k].append(wall)
            cpu[k].append(c)
    load = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
    print(f"{a.rounds} interleaved rounds, ms: wall median (min-max), CPU median; held jobs on "
          f"{os.environ['SLURM_CONF']}; load average {load} on {os.cpu_count()} CPUs")
    for k, v in times.items():
        print(f"  {k:44s} {statistics.median(v) * 1000:7.1f}  ({min(v) * 1000:.1f}-{max(v) * 1000:.1f})  "
              f"CPU {statistics.median(cpu[k]) * 1000:7.1f}")
    listing = next(k for k in cases if k.startswith("sinfo --version"))
    # the wall median says what a user waits on this machine now; the wall minimum is the closest to an idle
    # machine; the CPU median is the work done (slurmctld's share of sbatch is not in it)
    for label, data, agg in (("wall median", times, statistics.median), ("wall min", times, min),
                             ("CPU median", cpu, statistics.median)):
        m = {k: agg(v) * 1000 for k, v in data.items()}
        start = m["python -I -c pass"]
        print(f"{label}:")
        for what, value, target, ok in _targets(m, start, listing):
            print(f"  {what:58s} {value:8.2f}  target {target:14s} {'met' if ok else 'MISSED'}")
    return 0


def _targets(m: dict, start: float, listing: str):
    """(what, value, target text, met) for each target of issue 27, from one aggregate of the run; the figures
    without a target are printed with "-" and always read as met."""
    sb = m["sbatch"]
    out = []
    for case in ("slurmkit submit (CLI)", "slurmkit submit, new spec"):
        r = m["submitit, fresh process"] / m[case]
        out.append((f"submitit fresh / {case}", r, ">= 1", r >= 1))
        before = "before: " + case
        if before in m:
            out.append((f"{case} / {before}", m[case] / m[before], "-", True))
        out.append((f"{case} - sbatch, in start-ups", (m[case] - sb) / start, "-", True))
    r = m["slurmkit API, in-process Nth"] / m["submitit, in-process Nth"]
    out.append(("slurmkit API Nth / submitit in-process Nth", r, "<= 1.5x", r <= 1.5))
    for case in ("slurmkit nodes --json", "slurmkit audit --json"):
        n = (m[case] - m[listing]) / start
        out.append((f"{case} - its Slurm commands, in start-ups", n, "-", True))
    return out


if __name__ == "__main__":
    sys.exit(main())
