"""Replication during the job (issue 29): does it slow training, and how far behind is DEST?

A synthetic training loop (each step: `--step-ms` of CPU work, hashing, as a data loader's share of a GPU step)
writes a checkpoint of `--size-gib` GiB with slurmkit.checkpoint.save every `--every` seconds (a synchronous save,
as torch.save is), for `--seconds`, twice: without replication, then with slurmkit run's Replicator copying each
complete checkpoint to DEST (the same engine, niced child, `--bwlimit` MiB/s). Prints the training steps/s of both
runs, outside the synchronous saves and over the whole run with the saves counted, both ratios (target >= 0.95
each), each run's mean save time (a copy competing for the same disk slows the saves too: the copy pauses while a
save is written, checkpoint/pacing.py) and, for every replicated checkpoint, the copy time and the lag from "complete on local
disk" to "durable" (target: lag <= copy time + 5 s).

    python3 bench/bench_replicate.py --size-gib 1 --every 5 --seconds 60 --local /tmp/bench-local --dest /tmp/bench-dest

Use a node-local disk for --local and the durable filesystem for --dest; both are emptied first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from slurmkit import checkpoint  # noqa: E402
from slurmkit.checkpoint.replicate import Replicator  # noqa: E402

CHUNK = 64 << 20


def write_ckpt(size: int, step: int):
    block = hashlib.sha256(str(step).encode()).digest() * (CHUNK // 32)

    def fn(tmp: str) -> None:
        with open(os.path.join(tmp, "model.bin"), "wb") as f:
            left = size
            while left > 0:
                n = min(left, CHUNK)
                f.write(block[:n])
                left -= n

    return fn


def loop(a, local: str, repl: Replicator | None) -> dict:
    shutil.rmtree(local, ignore_errors=True)
    os.makedirs(local)
    size = int(a.size_gib * (1 << 30))
    steps, saves, save_s = 0, 0, 0.0
    t0 = time.monotonic()
    next_save = t0 + a.every
    buf = os.urandom(1 << 16)
    if repl is not None:
        repl.start()
    while time.monotonic() - t0 < a.seconds:
        end = time.monotonic() + a.step_ms / 1000
        while time.monotonic() < end:
            buf = hashlib.sha256(buf).digest() * 2048
        steps += 1
        if time.monotonic() >= next_save:
            s0 = time.monotonic()
            checkpoint.save(local, steps, write_ckpt(size, steps), keep=2)
            save_s += time.monotonic() - s0
            saves += 1
            next_save = time.monotonic() + a.every
    took = time.monotonic() - t0
    if repl is not None:
        repl.stop(final_timeout=120)
    # training throughput: steps per second spent training (the synchronous saves are the trainer's own cost in
    # both runs; how much slower the saves got next to a copy is reported apart, as save_s_mean)
    return {"steps": steps, "seconds": round(took, 2), "steps_per_s": steps / max(took - save_s, 1e-9),
            "steps_per_s_wall": steps / max(took, 1e-9),
            "saves": saves, "save_seconds": round(save_s, 2), "save_s_mean": round(save_s / max(saves, 1), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between checkpoints")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each run")
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--bwlimit", type=float, default=0.0, help="MiB/s for the replication (0: none)")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--local", default="/tmp/slurmkit-bench-local")
    ap.add_argument("--dest", default="/tmp/slurmkit-bench-dest")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print("command: " + " ".join([os.path.basename(sys.executable), *sys.argv]), flush=True)
    base = loop(a, a.local, None)
    shutil.rmtree(a.dest, ignore_errors=True)
    events: list[tuple[str, dict]] = []
    repl = Replicator(a.local, a.dest, series="bench", keep=2, interval=1.0, bwlimit_mib=a.bwlimit, nice=a.nice,
                      timeout=600, log=lambda ev, **kv: events.append((ev, kv)))
    withr = loop(a, a.local, repl)
    copies = [kv for ev, kv in events if ev == "replicated"]
    failed = [kv for ev, kv in events if ev != "replicated"]
    ratio = withr["steps_per_s"] / base["steps_per_s"]
    # issue 29's target read strictly: steps over the whole run, the synchronous saves counted (a copy that slows
    # the saves slows training by exactly that much)
    ratio_wall = withr["steps_per_s_wall"] / base["steps_per_s_wall"]
    worst = max((float(c["lag"].rstrip("s")) - float(c["seconds"]) for c in copies), default=float("nan"))
    out = {
        "size_gib": a.size_gib, "every_s": a.every, "without": base, "with": withr, "ratio": round(ratio, 3), "ratio_wall": round(ratio_wall, 3),
        "copies": [{"checkpoint": c["checkpoint"], "copy_s": float(c["seconds"]), "lag_s": float(c["lag"][:-1]),
                    "skipped": c.get("skipped"), "paused_for_saves": c.get("paused")} for c in copies],
        "lag_minus_copy_max_s": round(worst, 2), "failed": failed,
        "ok": min(ratio, ratio_wall) >= 0.95 and bool(copies) and worst <= 5.0 and not failed,
    }
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for what, r in (("without replication", base), ("with replication   ", withr)):
            print(f"{what}: {r['steps_per_s']:.2f} steps/s of training, {r['saves']} saves of "
                  f"{r['save_s_mean']:.2f}s each")
        print(f"ratio outside the saves {ratio:.3f}, over the whole run (saves counted) {ratio_wall:.3f} (both >= 0.95)")
        for c in out["copies"]:
            print(f"  {c['checkpoint']}: copy {c['copy_s']:.1f}s, lag {c['lag_s']:.1f}s"
                  + (f", paused {c['paused_for_saves']} for saves" if c["paused_for_saves"] else "")
                  + (f" (skipped {c['skipped']})" if c["skipped"] else ""))
        print(f"lag - copy time, worst: {worst:.1f}s (<= 5 s); failures: {len(failed)}; {'OK' if out['ok'] else 'MISSED'}")
    shutil.rmtree(a.local, ignore_errors=True)
    shutil.rmtree(a.dest, ignore_errors=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
