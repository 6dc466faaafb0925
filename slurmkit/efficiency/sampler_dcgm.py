"""The sampler's profiling half: ONE long-running `dcgmi dmon -e 1002,1004,1005 -d MS -i GPUS` child, its rows
(SM active, tensor pipe active, DRAM active: ratios, written as %) attributed to the job's GPUs by index.

Bounded: lines read MAX_LINE characters at most, MAX_NOISE of its other lines kept as the reason it failed. A
dcgmi with no sample within the start timeout is killed. It runs in the sampler's process group (the epilog's
one killpg ends it) and the sampler kills it on every stop. Standard library only (the prolog starts it).
"""

from __future__ import annotations

import math
import subprocess
import threading
import time

DCGM_FIELDS = "1002,1004,1005"
DCGM_COLS = ("SMACT", "TENSO", "DRAMA")  # dcgmi dmon's column names for those fields (ratios 0..1)
MAX_LINE = 4096
MAX_NOISE = 5  # non-data lines of dcgmi kept as the reason it failed


def _ratio_pct(cell: str):
    try:
        v = float(cell)
    except ValueError:
        return None  # N/A (the first sample, MIG), a cut cell
    return round(v * 100.0, 2) if math.isfinite(v) else None


def dcgm_row(cells: list[str], cols: list[str]) -> tuple[int, list] | None:
    """One `dcgmi dmon` data row (`GPU 3  0.512  0.204  0.330`) -> (gpu, [sm %, tensor %, dram %]) by the
    header's column names; None for anything else (a header, the units line, an error message)."""
    if len(cells) != len(cols) + 2 or cells[0] != "GPU" or not cells[1].isdigit():
        return None
    row = dict(zip(cols, cells[2:]))
    return int(cells[1]), [_ratio_pct(row[c]) if c in row else None for c in DCGM_COLS]


def sample_dcgm(
    argv: list[str], gpus: list[int], interval: float, start_timeout: float, w, stop: threading.Event, child: dict
) -> str:
    """Read ONE `dcgmi dmon` child's rows until it ends or the sampler stops; never raises, never waits past
    start_timeout for a first sample. Returns "ok" or why there are no profiling fields."""
    argv = list(argv) + [
        "dmon",
        "-e",
        DCGM_FIELDS,
        "-d",
        str(max(1, int(interval * 1000))),
        "-i",
        ",".join(map(str, gpus)),
    ]
    try:
        # stderr into stdout: its error message is the reason the record gives; same process group as the sampler
        p = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
    except OSError as e:
        return _dcgm_off(w, f"dcgmi not run: {e}")
    child["dcgmi"] = p
    started = threading.Event()
    cols: list[str] = []
    noise: list[str] = []

    def deadline() -> None:
        if not started.wait(start_timeout) and not stop.is_set():
            noise.append(f"no sample within {start_timeout:g} s")
            p.kill()

    threading.Thread(target=deadline, daemon=True).start()
    last_t = None
    out = p.stdout
    assert out is not None  # Popen(stdout=PIPE)
    for line in iter(lambda: out.readline(MAX_LINE), ""):
        cells = line.split()
        if cells[:1] == ["#Entity"]:
            cols = cells[1:]
            continue
        got = dcgm_row(cells, cols) if cols else None
        if got is None:
            if cells and cells[0] != "ID" and len(noise) < MAX_NOISE:
                noise.append(line.strip()[:200])
            continue
        idx, vals = got
        if idx not in gpus:
            continue
        if not started.is_set():
            started.set()
            w.write({"dcgm": "ok"})
        now = round(time.time(), 3)
        new_tick = last_t is None or now - last_t > interval / 2
        if new_tick:
            last_t = now
        w.sample([last_t, idx, "dcgm", *vals], new_tick, kind="dcgm")
    rc = p.wait()
    started.set()
    if stop.is_set():
        return "ok"
    why = f"dcgmi dmon ended (exit {rc})" + (": " + "; ".join(noise) if noise else "")
    return _dcgm_off(w, why)


def run_dcgm(*args) -> None:
    """The dcgmi thread's body: a failure of the reader itself is a record line, never a traceback or a hang."""
    w, child = args[4], args[6]
    try:
        sample_dcgm(*args)
    except Exception as e:  # noqa: BLE001
        _dcgm_off(w, f"dcgmi reader failed: {type(e).__name__}: {e}")
        p = child.get("dcgmi")
        if p is not None:
            try:
                p.kill()
            except OSError:
                pass


def _dcgm_off(w, why: str) -> str:
    w.write({"event": "dcgm-unavailable", "error": why})
    return why
