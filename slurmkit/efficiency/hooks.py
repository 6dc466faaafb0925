"""The two calls the hooks make: `start(settings, environ)` from the prolog, `stop(settings, environ)` from the
epilog. Neither raises nor waits long: a sampler that cannot start is one line on stderr, never a failed job.
Standard library only (no click, jinja2, paramiko, yaml): the hooks' import path stays light.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

STALE_SECONDS = 7 * 86400
SAMPLER_MODULE = "slurmkit.efficiency.sampler"


def _dir(settings) -> str:
    return os.path.join(settings.paths.state_dir, "efficiency")


def _files(settings, job_id: int, node: str) -> tuple[str, str]:
    base = os.path.join(_dir(settings), f"{job_id}.{node}")
    return base + ".samples", base + ".pid"


def _job(settings, environ):
    """(efficiency settings, job id, node, GPUs) for a GPU job with efficiency on, else None."""
    eff = settings.efficiency
    if not eff.enabled:
        return None
    from ..hooks.common import job_gpus, job_id

    jid, gpus = job_id(environ), job_gpus(environ)
    if jid is None or not gpus:
        return None  # a CPU job: nothing to sample
    return eff, jid, environ.get("SLURMD_NODENAME") or os.uname().nodename, gpus


def start(settings, environ) -> int | None:
    """Start the job's sampler, detached; returns its pid (None: not started, and why is on stderr)."""
    try:
        job = _job(settings, environ)
        if job is None:
            return None
        eff, jid, node, gpus = job
        d = _dir(settings)
        os.makedirs(d, mode=0o700, exist_ok=True)
        _clean_stale(d)
        out, pidf = _files(settings, jid, node)
        from .. import proc

        opts: dict = {
            "job": jid,
            "gpus": ",".join(map(str, gpus)),
            "out": out,
            "interval": eff.interval,
            "max_bytes": eff.samples_max_bytes,
            "tool": settings.tools.nvidia_smi,
            "backend": eff.backend,
            "watchdog": eff.watchdog_interval,
            "start_grace": eff.start_grace,
        }
        if getattr(eff, "profiling", False):
            dcgmi = settings.tools.dcgmi
            opts["dcgmi"] = json.dumps([dcgmi] if isinstance(dcgmi, str) else list(dcgmi))
            opts["dcgm_start_timeout"] = eff.dcgm_start_timeout
        policy = idle_policy_arg(settings)
        if policy:
            opts["idle_policy"] = policy
            opts["node"] = node
        flags = [
            w
            for k, v in opts.items()
            for w in ("--" + k.replace("_", "-"), json.dumps(v) if isinstance(v, list) else str(v))
        ]
        env = {k: v for k, v in environ.items() if k.startswith(("SLURM", "SLURMKIT", "PATH", "CUDA"))}
        from ..hooks.common import module_argv  # without `site` when the prolog started so

        pid = proc.spawn_detached(module_argv(SAMPLER_MODULE) + flags, env=env)
        fd = os.open(pidf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{pid} {proc.start_time(pid) or ''}".strip())
        return pid
    except Exception as e:  # noqa: BLE001 - efficiency is never a reason to fail a job
        print(f"slurmkit prolog: efficiency sampler not started: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def idle_policy_arg(settings) -> str:
    """The sampler's --idle-policy (JSON: the idle_policy section, the health log, Slurm's tools), or "" when the
    site has not turned the policy on."""
    pol = getattr(settings, "idle_policy", None)
    if pol is None or not pol.enabled:
        return ""
    from ..record import asdict

    h = settings.health
    return json.dumps(
        {
            "policy": asdict(pol),
            "health_log": settings.paths.health_log,
            "log_max_bytes": h.log_max_bytes,
            "log_generations": h.log_generations,
            "slurm_bin_dir": settings.slurm.bin_dir,
        },
        separators=(",", ":"),
    )


def _clean_stale(d: str) -> None:
    """Sample files an epilog never collected (slurmd crashed): drop them after a week."""
    now = time.time()
    try:
        for name in os.listdir(d):
            p = os.path.join(d, name)
            try:
                if now - os.lstat(p).st_mtime > STALE_SECONDS:
                    os.unlink(p)
            except OSError:
                pass
    except OSError:
        pass


def _is_sampler(pid: int, job_id: int, started: int | None = None) -> bool:
    """Is pid still the job's sampler? The same start time as the prolog recorded (a pid is reused, the pair is
    not), or, from a pid file without one, its command line."""
    if started is not None:
        from ..proc import start_time

        return start_time(pid) == started
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(8192).split(b"\0")
    except OSError:
        return False
    return SAMPLER_MODULE.encode() in argv and str(job_id).encode() in argv


def _stop_pid(pid: int, job_id: int, started: int | None = None) -> tuple[bool, float | None]:
    """SIGKILL the sampler's process group (it and its nvidia-smi child) at once: every sample line is already
    flushed, so there is nothing to wait for. Returns whether it was still running, and the CPU seconds it had
    used (what per-job sampling costs the node)."""
    from ..proc import cpu_seconds

    if not _is_sampler(pid, job_id, started):
        return False, None  # gone already (its watchdog saw the job end), or a reused pid: not ours
    cpu = cpu_seconds(pid)
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True, cpu
    except OSError:
        return False, cpu


def stop(settings, environ) -> dict | None:
    """Stop the job's sampler and append the job's record to the job-efficiency log; returns the record."""
    try:
        job = _job(settings, environ)
        if job is None:
            return None
        eff, jid, node, gpus = job
        out, pidf = _files(settings, jid, node)
        try:
            with open(pidf, encoding="utf-8") as f:
                words = f.read(64).split()  # "PID START" (START: proc.start_time; absent from older files)
            pid = int(words[0]) if words else 0
            started = int(words[1]) if len(words) > 1 else None
        except (OSError, ValueError):
            pid, started = 0, None
        stopped, cpu = _stop_pid(pid, jid, started) if pid else (False, None)
        from ..bounded import read_text
        from . import mfu as mfu_mod
        from . import record
        from .verdict import Thresholds

        try:
            text = read_text(out, what="sampler output", limit=eff.samples_max_bytes * 2 + (1 << 20))
        except Exception:  # noqa: BLE001 - no samples: the record says so (unknown), it is not skipped
            text = ""
        cap, head = record.load_samples(text)
        if not head:
            head = {"job_id": jid, "gpus": gpus}
            cap.note("no sampler output for this job (the sampler did not start or its file is gone)", severity="warn")
            for i in gpus:
                cap.gpu(i, index=i)
        head.setdefault("job_id", jid)
        if stopped and not head.get("end_reason"):
            head["end_reason"] = "stopped by the epilog"
        rec = record.build(cap, head, Thresholds.from_settings(eff), environ=environ, node=node)
        rec["mfu"] = mfu_mod.for_record(settings, rec, environ)
        if cpu is not None:
            rec["sampler_cpu_seconds"] = round(cpu, 3)
        record.append(record.log_path(settings), rec, eff.log_max_bytes)
        for p in (out, pidf, out + ".tmp"):
            try:
                os.unlink(p)
            except OSError:
                pass
        return rec
    except Exception as e:  # noqa: BLE001
        print(f"slurmkit epilog: efficiency record not written: {type(e).__name__}: {e}", file=sys.stderr)
        return None
