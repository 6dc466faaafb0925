"""A toy training loop for the checkpoint/requeue tests: a counter with a deterministic state.

    python toy_train.py CKPT_DIR TARGET_STEPS SECONDS_PER_STEP SAVE_EVERY [BLOB_KIB]

state(n) = sha256(state(n-1) + n), state(0) = sha256("seed"). Each checkpoint holds state.json and, with
BLOB_KIB, four blob files derived from the state (to make saves take long enough to be killed in the middle).
It resumes from slurmkit.checkpoint.latest(), saves every SAVE_EVERY steps and when a stop is requested, and
prints `toy: done step=N value=HEX` when it reaches TARGET_STEPS.
"""
import hashlib
import json
import os
import sys
import time

from slurmkit import checkpoint


def advance(value: str, step: int) -> str:
    return hashlib.sha256(f"{value}:{step}".encode()).hexdigest()


def blob(value: str, i: int, kib: int) -> bytes:
    seed = hashlib.sha256(f"{value}/{i}".encode()).digest()
    return (seed * (1024 // len(seed) + 1))[:1024] * kib


def main() -> int:
    ckdir, target, delay, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    kib = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    step, value = 0, hashlib.sha256(b"seed").hexdigest()
    ck = checkpoint.latest(ckdir)
    if ck is not None:
        with open(os.path.join(ck.path, "state.json")) as f:
            st = json.load(f)
        step, value = st["step"], st["value"]
        print(f"toy: resumed step={step}", flush=True)
    saved = step

    def save():
        def write(tmp):
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump({"step": step, "value": value}, f)
            for i in range(4 if kib else 0):
                with open(os.path.join(tmp, f"blob-{i}.bin"), "wb") as f:
                    f.write(blob(value, i, kib))
        checkpoint.save(ckdir, step, write, keep=3)

    while step < target:
        if checkpoint.stop_requested():
            if saved != step:
                save()
            print(f"toy: stopped step={step}", flush=True)
            return 0
        step += 1
        value = advance(value, step)
        if delay:
            time.sleep(delay)
        if step % every == 0 or step == target:
            save()
            saved = step
    print(f"toy: done step={step} value={value}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
