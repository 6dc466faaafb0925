#!/usr/bin/env python3
"""Benchmark: `slurmkit sync` of a realistic checkpoint vs `cp -r` + `sync` of the same data, side by side.

    .venv/bin/python bench/bench_sync.py [--mib 768] [--rounds 3] [--dir /tmp]

The checkpoint: 4 large shards plus 200 small files (4-64 KiB), with its manifest (sha256). Each round times, in
alternating order, `cp -r SRC DST && sync` and `slurmkit sync SRC DST` (the CLI, startup included, every file
copied, fsynced and its hash verified at the destination), then a re-sync of the unchanged checkpoint. Both read
the source from the page cache (it was just written). Prints medians and the ratios:
  throughput ratio = slurmkit MB/s / cp MB/s  (target >= 0.9 through the CLI, issue 18)
  re-sync ratio    = unchanged re-sync time / first sync time  (target < 0.05)
and, for the choice of hash, sha256 vs blake2b throughput over the shards on this machine. The machine is
shared and noisy: medians, best-of-N and the per-round ratio are all printed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from slurmkit.checkpoint import manifest as mf  # noqa: E402


def make_checkpoint(root: str, mib: int) -> int:
    d = os.path.join(root, "step-0000001000")
    os.makedirs(os.path.join(d, "model"))
    os.makedirs(os.path.join(d, "small"))
    shard = (mib - 8) * (1 << 20) // 4
    block = os.urandom(1 << 20)
    total = 0
    for i in range(4):
        with open(os.path.join(d, "model", f"shard-{i:02d}.bin"), "wb") as f:
            left = shard
            while left:
                n = min(left, len(block))
                f.write(block[:n] if i % 2 else os.urandom(n))
                left -= n
        total += shard
    rnd = __import__("random").Random(7)
    for i in range(200):
        n = rnd.randint(4 << 10, 64 << 10)
        with open(os.path.join(d, "small", f"param-{i:03d}.pt"), "wb") as f:
            f.write(os.urandom(n))
        total += n
    mf.write(d, mf.build(d, 1000, algo="sha256"))
    return total


def timed(argv: list[str], env: dict | None = None) -> float:
    subprocess.run(["sync"], check=True)
    time.sleep(0.5)  # let the writeback of the previous step's deletions settle
    t = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.monotonic() - t


def hash_rate(path: str, algo: str) -> float:
    t = time.monotonic()
    size = 0
    for dirpath, _, files in os.walk(path):
        for n in files:
            if n.startswith("shard"):
                size += mf.hash_file(os.path.join(dirpath, n), algo)[0]
    return size / (time.monotonic() - t) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    a = ap.parse_args()
    sk = os.path.join(os.path.dirname(sys.executable), "slurmkit")
    if not os.path.exists(sk):
        sk = None
    # what a wheel install has (pip compiles on install): slurmkit's modules byte-compiled, so a run under
    # PYTHONDONTWRITEBYTECODE=1 (an editable checkout that never compiled them) does not time the compiler
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(REPO, "slurmkit")], check=True,
                   capture_output=True)
    base = tempfile.mkdtemp(prefix="bench-sync-", dir=a.dir)
    env = dict(os.environ, SLURMKIT_CONFIG="/dev/null")
    try:
        src = os.path.join(base, "src")
        total = make_checkpoint(src, a.mib)
        print(f"checkpoint: {total / 2**20:.0f} MiB (4 shards + 200 small files) in {base}")
        for algo in ("sha256", "blake2b"):
            print(f"hash {algo}: {hash_rate(src, algo):.0f} MB/s")
        from slurmkit.checkpoint import sync as cs
        cp_t, sk_t, re_t, lib_t, lre_t = [], [], [], [], []
        for r in range(a.rounds):
            for which in (("cp", "sk") if r % 2 == 0 else ("sk", "cp")):
                dst = os.path.join(base, f"dst-{which}")
                shutil.rmtree(dst, ignore_errors=True)
                if which == "cp":
                    cp_t.append(timed(["sh", "-c", 'cp -r "$0" "$1" && sync', src, dst]))
                else:
                    argv = [sk] if sk else [sys.executable, "-c", "from slurmkit.cli import main; main()"]
                    t = timed(argv + ["sync", src, dst, "--keep", "3"], env)  # the defaults: no site config
                    sk_t.append(t)
                    re_t.append(timed(argv + ["sync", src, dst, "--keep", "3"], env))
                    m = mf.read(os.path.join(dst, "step-0000001000"))
                    assert m and not mf.verify(os.path.join(dst, "step-0000001000"), m)
            # the library call the epilog makes (no interpreter/CLI startup), first sync and unchanged re-sync
            dst = os.path.join(base, "dst-lib")
            shutil.rmtree(dst, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            time.sleep(0.5)
            t = time.monotonic()
            assert cs.sync_dir(src, dst, keep=3)["copied"] == ["step-0000001000"]
            lib_t.append(time.monotonic() - t)
            t = time.monotonic()
            assert cs.sync_dir(src, dst, keep=3)["skipped"] == ["step-0000001000"]
            lre_t.append(time.monotonic() - t)
            print(f"round {r + 1}: cp+sync {cp_t[-1]:.2f}s  slurmkit sync {sk_t[-1]:.2f}s  re-sync {re_t[-1]:.3f}s  "
                  f"library sync {lib_t[-1]:.2f}s re-sync {lre_t[-1] * 1000:.1f}ms",
                  flush=True)
        cp_m, sk_m, re_m, lib_m, lre_m = (statistics.median(x) for x in (cp_t, sk_t, re_t, lib_t, lre_t))
        mb = total / 1e6
        print(f"median: cp -r + sync {cp_m:.2f}s ({mb / cp_m:.0f} MB/s); slurmkit sync {sk_m:.2f}s "
              f"({mb / sk_m:.0f} MB/s, hashes verified); unchanged re-sync {re_m:.3f}s")
        met = lambda ok: "met" if ok else "MISSED"  # noqa: E731
        print(f"throughput ratio slurmkit/cp: {cp_m / sk_m:.2f}x (target >= 0.9: {met(cp_m / sk_m >= 0.9)})")
        print(f"throughput ratio library sync_dir/cp: {cp_m / lib_m:.2f}x")
        print(f"best of {a.rounds} (least disturbed by other load): cp -r + sync {min(cp_t):.2f}s, slurmkit sync "
              f"{min(sk_t):.2f}s -> {min(cp_t) / min(sk_t):.2f}x, library {min(lib_t):.2f}s -> "
              f"{min(cp_t) / min(lib_t):.2f}x; per-round ratio median {statistics.median(c / k for c, k in zip(cp_t, sk_t)):.2f}x")
        print(f"re-sync/first-sync time, library (what the epilog runs): {lre_m / lib_m:.4f} (target < 0.05: "
              f"{met(lre_m / lib_m < 0.05)})")
        print(f"re-sync/first-sync time, CLI (each includes the interpreter's and slurmkit's start-up): "
              f"{re_m / sk_m:.3f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
