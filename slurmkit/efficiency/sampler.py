"""The per-job GPU sampler: `python -I -m slurmkit.efficiency.sampler --job ID --gpus 0,1 --out FILE ...`.

The prolog starts it detached (its own session, so it survives the prolog's exit); the epilog stops it and turns
its samples into the job's record. Per allocated GPU it samples utilisation, memory used and power through NVML
(`nvidia-ml-py`, no process per sample) where that imports, else ONE long-running
`nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms N` child whose lines it reads as they come.
With --dcgmi, beside it ONE long-running `dcgmi dmon -e 1002,1004,1005 -d MS -i GPUS` child adds DCGM's
profiling fields (SM active, tensor pipe active, DRAM active) per GPU; where dcgmi is missing, fails, or prints
no sample within --dcgm-start-timeout, the sampler goes on without them and writes why.

It never outlives its job: a watchdog looks for the job's slurmstepd (`slurmstepd: [ID.batch]`, `[ID.0]`, ...)
and exits once it is gone (or never appeared within --start-grace). Output is bounded: past --max-bytes the
file is rewritten at half the resolution and the sampler keeps every second tick from then on.

File format (JSON lines): a header {"v": 1, "job_id", "gpus", "interval", "backend", "start"}; one
{"gpu": i, "uuid", "name", "power_limit", "mem_total"} per GPU; samples [t, gpu, util, mem_used_mib, power_w];
profiling samples [t, gpu, "dcgm", sm_active_pct, tensor_active_pct, dram_active_pct]; a {"dcgm": "ok"} line once
dcgmi gave its first sample, or {"event": "dcgm-unavailable", "error": ...} when it did not; an {"end": t,
"why": ...} line when it stops. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from ..files import atomic_write
from .sampler_dcgm import run_dcgm

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

FIELDS = "index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,power.limit"
# the SM clock and the clock event reasons (a straggler's likely cause), asked first; a driver that refuses a
# field ends nvidia-smi before its first row, and the sampler asks the next set: drivers before 535 know the
# reasons as clocks_throttle_reasons; the last set is the one every driver answers
FIELD_SETS = (
    FIELDS + ",clocks.sm,clocks_event_reasons.active",
    FIELDS + ",clocks.sm,clocks_throttle_reasons.active",
    FIELDS,
)
MAX_LINE = 4096


def job_alive(job_id: int, proc_root: str = "/proc", known: set | None = None) -> bool:
    """Is any slurmstepd of the job running on this host? (its process title is `slurmstepd: [ID.step]`)
    `known`: stepd pids seen before, checked first, so a running job costs one read, not a scan of /proc."""
    want = f"slurmstepd: [{job_id}.".encode()

    def is_stepd(p) -> bool:
        try:
            with open(f"{proc_root}/{p}/cmdline", "rb") as f:
                return f.read(256).startswith(want)
        except OSError:
            return False

    if known:
        for p in list(known):
            if is_stepd(p):
                return True
            known.discard(p)
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return True  # cannot tell: do not kill the sampler on a doubt; the epilog stops it
    found = [p for p in pids if is_stepd(p)]
    if known is not None:
        known.update(found)
    return bool(found)


def _mask(s: str) -> int | None:
    """'0x0000000000000080' -> 128; [N/A], [Not Supported] -> None."""
    try:
        return int(s, 16)
    except ValueError:
        return None


def _num(s: str):
    s = s.strip()
    try:
        return float(s)
    except ValueError:
        return None  # [N/A], [Not Supported], ERR!


class Writer:
    """Appends sample lines to the output file, keeping it under max_bytes by halving the resolution."""

    def __init__(self, path: str, max_bytes: int, header: dict):
        self.path, self.max_bytes = path, max_bytes
        self.stride = 1
        self.ticks: dict = {}  # per kind of sample (nvidia-smi/NVML, dcgm): each kind keeps its own stride
        self.meta_seen: set = set()
        self.observe: Any = None  # the idle policy's IdleRuns.add(t, gpu, util): every GPU sample, before any stride
        self.lock = threading.RLock()  # the dcgmi reader writes from its own thread
        self.closed = False
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self.f = os.fdopen(fd, "w", encoding="utf-8")
        self.write(header)
        self.size = self.f.tell()

    def write(self, obj) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self.lock:
            if self.closed:
                return
            self.f.write(line)
            self.f.flush()
            self.size = getattr(self, "size", 0) + len(line)

    def gpu_meta(self, idx, **meta) -> None:
        if idx not in self.meta_seen:
            self.meta_seen.add(idx)
            self.write({"gpu": idx, **meta})

    def sample(self, row: list, new_tick: bool, kind: str = "gpu") -> None:
        if self.observe is not None and kind == "gpu":
            self.observe(row[0], row[1], row[2])
        with self.lock:
            tick = self.ticks[kind] = self.ticks.get(kind, 0) + (1 if new_tick else 0)
            if tick % self.stride:
                return
            self.write(row)
            if self.size > self.max_bytes:
                self._halve()

    def _halve(self) -> None:
        self.f.close()
        with open(self.path, encoding="utf-8") as f:
            lines = f.readlines()
        keep: list[str] = []
        ticks: dict[str, Any] = {}
        last_t: dict[str, Any] = {}
        for ln in lines:
            if ln.startswith("["):
                t = ln.split(",", 1)[0]
                kind = "dcgm" if ',"dcgm",' in ln else "gpu"  # every second tick of each kind goes
                if t != last_t.get(kind):
                    ticks[kind], last_t[kind] = ticks.get(kind, 0) + 1, t
                if ticks[kind] % 2:
                    continue
            keep.append(ln)
        atomic_write(self.path, "".join(keep) + json.dumps({"stride": self.stride * 2}) + "\n", mode=0o600)
        self.stride *= 2
        self.f = open(self.path, "a", encoding="utf-8")
        self.size = self.f.tell()

    def close(self, why: str) -> None:
        with self.lock:
            try:
                self.write({"end": time.time(), "why": why})
                self.closed = True
                self.f.close()
            except (OSError, ValueError):
                pass


def nvml_available() -> bool:
    """nvidia-ml-py imports AND the driver's NVML library initialises (without a driver: use nvidia-smi)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return False


def sample_nvml(gpus: list[int], interval: float, w: Writer, stop: threading.Event) -> str:
    import pynvml

    pynvml.nvmlInit()
    try:
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in gpus}
        # nvidia-ml-py 12.535+ names it ClocksEventReasons, older ones ClocksThrottleReasons (the same call); a
        # binding without either (or without clock reads) samples without them
        reasons_of = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        clock_of = getattr(pynvml, "nvmlDeviceGetClockInfo", None)
        sm_clock = getattr(pynvml, "NVML_CLOCK_SM", 1)
        for i, h in handles.items():

            def q(fn, *a):
                try:
                    return fn(h, *a)
                except pynvml.NVMLError:
                    return None

            name = q(pynvml.nvmlDeviceGetName)
            limit = q(pynvml.nvmlDeviceGetEnforcedPowerLimit)
            mem = q(pynvml.nvmlDeviceGetMemoryInfo)
            w.gpu_meta(
                i,
                uuid=_s(q(pynvml.nvmlDeviceGetUUID)),
                name=_s(name),
                power_limit=limit / 1000 if limit else None,
                mem_total=mem.total / 2**20 if mem else None,
            )
        while not stop.is_set():
            t = round(time.time(), 3)
            first = True
            for i, h in handles.items():
                try:
                    util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
                except pynvml.NVMLError:
                    util = None  # MIG: no utilisation
                try:
                    mem = pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
                except pynvml.NVMLError:
                    mem = None
                try:
                    pw = pynvml.nvmlDeviceGetPowerUsage(h) / 1000
                except pynvml.NVMLError:
                    pw = None
                try:
                    clk = clock_of(h, sm_clock) if clock_of else None
                except pynvml.NVMLError:
                    clk = None
                try:
                    why = reasons_of(h) if reasons_of else None
                except pynvml.NVMLError:
                    why = None
                w.sample([t, i, util, mem, pw, clk, why], first)
                first = False
            stop.wait(interval)
        return "stopped"
    finally:
        pynvml.nvmlShutdown()


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def sample_smi(
    tool: str | list[str], gpus: list[int], interval: float, w: Writer, stop: threading.Event, child: dict
) -> str:
    # tools.nvidia_smi may be an argv prefix (a list; JSON on the command line) as for every other tool
    prefix = list(tool) if isinstance(tool, list) else (_tool_argv(tool) if tool.startswith("[") else [tool])
    every = str(max(1, int(interval * 1000)))
    field_set = 0  # FIELD_SETS[field_set] is asked; the next one when a driver refuses it
    env = dict(os.environ)
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    restarts = 0
    while not stop.is_set():
        fields = FIELD_SETS[field_set]
        ncols = fields.count(",") + 1
        argv = [*prefix, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", every]
        rows = 0
        try:
            # in the sampler's own process group (the prolog started the sampler as a session leader): the
            # epilog's one killpg ends both, and no nvidia-smi is left behind
            p = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                env=env,
                text=True,
                errors="replace",
            )
        except OSError as e:
            w.write({"event": "tool-missing", "error": str(e)})
            return "tool-missing"
        child["nvidia-smi"] = p
        last_t = None
        out = p.stdout
        assert out is not None  # Popen(stdout=PIPE)
        for line in iter(lambda: out.readline(MAX_LINE), ""):
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != ncols or not cells[0].isdigit():
                continue
            rows += 1
            idx = int(cells[0])
            if idx not in gpus:
                continue
            now = round(time.time(), 3)
            w.gpu_meta(idx, uuid=cells[1], name=cells[2], power_limit=_num(cells[7]), mem_total=_num(cells[5]))
            new_tick = last_t is None or now - last_t > interval / 2
            if new_tick:
                last_t = now
            row = [last_t, idx, _num(cells[3]), _num(cells[4]), _num(cells[6])]
            if ncols > 8:
                row += [_num(cells[8]), _mask(cells[9])]
            w.sample(row, new_tick)
        rc = p.wait()
        if stop.is_set():
            break
        if not rows and rc and field_set < len(FIELD_SETS) - 1:
            field_set += 1  # refused before its first row: an older driver, not a failure of the tool
            continue
        restarts += 1
        w.write({"event": "tool-exit", "rc": rc, "restarts": restarts})
        if restarts > 5:
            return "tool-failed"
        stop.wait(interval)
    return "stopped"


class Options:
    """What the sampler samples and how: the command line's flags (the prolog passes them to a forked sampler
    as these keyword arguments, without argparse)."""

    def __init__(
        self,
        job: int,
        gpus: str,
        out: str,
        interval: float = 10.0,
        max_bytes: int = 4 << 20,
        tool: str = "nvidia-smi",
        backend: str = "auto",
        watchdog: float = 5.0,
        start_grace: float = 120.0,
        proc_root: str = "/proc",
        dcgmi: str = "",
        dcgm_start_timeout: float = 30.0,
        idle_policy: str = "",
        node: str = "",
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.job, self.gpus, self.out = int(job), str(gpus), str(out)
        self.interval, self.max_bytes, self.tool, self.backend = float(interval), int(max_bytes), tool, backend
        self.watchdog, self.start_grace, self.proc_root = float(watchdog), float(start_grace), proc_root
        self.dcgmi, self.dcgm_start_timeout = dcgmi, float(dcgm_start_timeout)
        self.idle_policy, self.node = idle_policy, node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename


BACKENDS = ("auto", "nvml", "nvidia-smi")


def parse_args(argv=None) -> Options:
    import argparse

    ap = argparse.ArgumentParser(prog="slurmkit-sampler")
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--gpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--max-bytes", type=int, default=4 << 20)
    ap.add_argument("--tool", default="nvidia-smi")
    ap.add_argument("--backend", choices=BACKENDS, default="auto")
    ap.add_argument("--watchdog", type=float, default=5.0)
    ap.add_argument("--start-grace", type=float, default=120.0)
    ap.add_argument("--proc-root", default="/proc")
    ap.add_argument("--dcgmi", default="", help="dcgmi's argv as JSON (a list) or one path; empty: no profiling")
    ap.add_argument("--dcgm-start-timeout", type=float, default=30.0)
    ap.add_argument("--idle-policy", default="", help="the idle policy's settings as JSON (efficiency/idleact.py)")
    ap.add_argument("--node", default="")
    return Options(**vars(ap.parse_args(argv)))


def main(argv=None) -> int:
    return run(parse_args(argv))


def run(a: Options) -> int:
    gpus = [int(x) for x in a.gpus.split(",") if x.strip().isdigit()]
    backend = a.backend
    if backend == "auto":
        backend = "nvml" if nvml_available() else "nvidia-smi"
    if backend == "nvml" and a.backend == "nvml" and not nvml_available():
        backend = "nvidia-smi"  # asked for NVML on a node without it: still sample, and say so below
    dcgm_argv = _tool_argv(a.dcgmi)
    w = Writer(
        a.out,
        a.max_bytes,
        {
            "v": 1,
            "job_id": a.job,
            "gpus": gpus,
            "interval": a.interval,
            "backend": backend,
            "start": time.time(),
            "pid": os.getpid(),
            "dcgm": bool(dcgm_argv),
        },
    )
    if backend != a.backend and a.backend == "nvml":
        w.write({"event": "nvml-unavailable", "error": "nvidia-ml-py missing or NVML did not initialise"})
    stop = threading.Event()
    why = ["stopped"]
    child: dict = {}

    def halt(reason: str) -> None:
        why[0] = reason
        stop.set()
        for p in list(child.values()):
            try:
                p.kill()
            except OSError:
                pass

    signal.signal(signal.SIGTERM, lambda *_: halt("stopped by the epilog"))
    signal.signal(signal.SIGINT, lambda *_: halt("interrupted"))

    def watchdog() -> None:
        start, seen, misses = time.monotonic(), False, 0
        known: set[str] = set()
        while not stop.wait(a.watchdog):
            if not os.path.exists(a.out):
                return halt("output file removed")
            if job_alive(a.job, a.proc_root, known):
                seen, misses = True, 0
            elif seen:
                misses += 1
                if misses >= 2:
                    return halt("job gone")
            elif time.monotonic() - start > a.start_grace:
                return halt("job never started")

    threading.Thread(target=watchdog, daemon=True).start()
    if a.idle_policy:
        _start_idle_policy(a, gpus, w, stop)
    if dcgm_argv:
        threading.Thread(
            target=run_dcgm, daemon=True, args=(dcgm_argv, gpus, a.interval, a.dcgm_start_timeout, w, stop, child)
        ).start()
    try:
        if backend == "nvml":
            sample_nvml(gpus, a.interval, w, stop)
        else:
            r = sample_smi(a.tool, gpus, a.interval, w, stop, child)
            if r != "stopped":
                why[0] = r
    except Exception as e:  # noqa: BLE001 - a sampler failure is a record, never a hang
        why[0] = f"error: {type(e).__name__}: {e}"
    if not stop.is_set():
        halt(why[0])  # nvidia-smi gave up: no dcgmi child outlives the sampler either
    w.close(why[0])
    return 0


def _start_idle_policy(a: Options, gpus: list[int], w: Writer, stop: threading.Event) -> None:
    """The idle policy beside the samples (issue 34): every sample feeds its idle runs; a thread of its own
    decides and acts (Slurm's answers never hold up a sample). A policy that cannot start or act is said in the
    file (the job's efficiency record shows it)."""
    said: set = set()

    def say(msg: str) -> None:
        if msg not in said and len(said) < 20:
            said.add(msg)
            w.write({"event": "idle-policy-error", "error": msg})

    try:
        from .idleact import Actor

        actor = Actor(json.loads(a.idle_policy), a.job, a.node, gpus, say=say)
        runs = actor.runs()
    except Exception as e:  # noqa: BLE001 - a bad policy never stops the sampling
        w.write({"event": "idle-policy-off", "error": f"{type(e).__name__}: {e}"})
        return
    w.observe = runs.add

    def loop() -> None:
        while not stop.wait(max(a.interval, 0.5)):
            try:
                actor.step(runs)
            except Exception as e:  # noqa: BLE001 - said in the file, and the sampling goes on
                say(f"{type(e).__name__}: {e}")

    threading.Thread(target=loop, daemon=True).start()


def _tool_argv(spec: str) -> list[str]:
    spec = spec.strip()
    if spec.startswith("["):
        try:
            v = json.loads(spec)
        except ValueError:
            return []
        return [str(x) for x in v] if isinstance(v, list) else []
    return [spec] if spec else []


if __name__ == "__main__":
    sys.exit(main())
