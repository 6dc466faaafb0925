#!/usr/bin/env python3
"""What an atomic, verified checkpoint costs, and what the wrapper costs, measured side by side in one run.

    .venv/bin/python bench/bench_checkpoint.py [--mib 64] [--repeat 5] [--dir /tmp]

Per repeat, the same bytes (4 files) are written three ways into fresh directories under --dir:
  plain   write the files, nothing else (what a naive script does)
  fsync   write + fsync each file (the durable minimum)
  save    slurmkit.checkpoint.save: write, fsync files and dirs, sha256 manifest written last, rename, fsync parent
and `slurmkit run -- true` is timed against `python -c pass` (wrapper start-up and teardown). Medians; ratios.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from slurmkit import checkpoint  # noqa: E402


def write_files(d, blobs, sync):
    for i, b in enumerate(blobs):
        with open(os.path.join(d, f"shard-{i}.bin"), "wb") as f:
            f.write(b)
            if sync:
                f.flush()
                os.fsync(f.fileno())


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    blobs = [os.urandom(a.mib * 1024 * 1024 // 4) for _ in range(4)]
    root = tempfile.mkdtemp(prefix="bench-ckpt-", dir=a.dir)
    res = {"plain": [], "fsync": [], "save": []}
    try:
        for r in range(a.repeat):
            for kind in res:                       # interleaved: the machine's noise hits all three alike
                d = os.path.join(root, f"{kind}-{r}")
                if kind == "save":
                    res[kind].append(timed(lambda: checkpoint.save(d, r, lambda t: write_files(t, blobs, False))))
                else:
                    os.mkdir(d)
                    res[kind].append(timed(lambda: write_files(d, blobs, kind == "fsync")))
                shutil.rmtree(d)
        wrap, bare = [], []
        sk = [sys.executable, "-m", "slurmkit.cli", "--config", os.devnull, "run", "--", "true"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        for _ in range(a.repeat):
            bare.append(timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)))
            wrap.append(timed(lambda: subprocess.run(sk, check=True, env=env, stderr=subprocess.DEVNULL)))
        imp = [timed(lambda: subprocess.run([sys.executable, "-c", "import slurmkit.checkpoint"], check=True))
               for _ in range(a.repeat)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"checkpoint of {a.mib} MiB (4 files) in {a.dir}, median of {a.repeat}:")
    for k, v in med.items():
        print(f"  {k:6s} {v * 1000:8.1f} ms  {a.mib / v:7.0f} MiB/s")
    print(f"  save / plain = {med['save'] / med['plain']:.2f}x   save / fsync = {med['save'] / med['fsync']:.2f}x")
    b, w, i = statistics.median(bare), statistics.median(wrap), statistics.median(imp)
    print(f"wrapper: python -c pass {b * 1000:.0f} ms, slurmkit run -- true {w * 1000:.0f} ms "
          f"(+{(w - b) * 1000:.0f} ms, {w / b:.1f}x); import slurmkit.checkpoint {i * 1000:.0f} ms ({i / b:.2f}x)")


if __name__ == "__main__":
    main()
