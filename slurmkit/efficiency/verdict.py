"""Verdicts per GPU and per job, from samples and the site's thresholds (efficiency.* in the config). Pure.

  hung       utilisation >= hung_util_pct while power < hung_power_ratio x the board's limit, for hung_seconds in
             a row (a stuck NCCL collective spins at "100 %" at a fraction of the power)
  suspect-hung  that signature (utilisation >= hung_util_pct with power < hung_power_ratio x the limit, or SM
             activity < sm_low_active_pct) in every sample when too few samples or no interval allow a duration:
             one snapshot of a spin-waiting collective is a suspect hang, never "busy"
  idle       utilisation <= idle_util_pct in at least idle_fraction of the samples (memory held or not)
  underused  mean utilisation under underused_util_pct
  busy       the rest
  (finding) utilisation mean >= sm_busy_util_pct while DCGM's SM activity mean < sm_low_active_pct: the GPU is
             "busy" running little (few SMs occupied: small kernels, launch-bound, a spin-wait); not a state
  unknown    fewer than min_samples readable samples, or no utilisation at all (MIG, N/A, a compute-apps list)

A job's verdict is its worst GPU's, in that order (hung, suspect-hung, idle, unknown, underused, busy).
"""

from __future__ import annotations

from ..record import Record

from .model import STATES, Capture, GpuSeries

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


class Thresholds(Record, frozen=True, kw_only=False):
    """The efficiency verdicts' thresholds (config `efficiency.*`)."""

    idle_util_pct: float = 5.0
    idle_fraction: float = 0.9
    underused_util_pct: float = 30.0
    hung_util_pct: float = 90.0
    hung_power_ratio: float = 0.35
    hung_seconds: float = 300.0
    min_samples: int = 3
    held_memory_mib: float = 1024.0
    sm_busy_util_pct: float = 80.0
    sm_low_active_pct: float = 20.0

    @classmethod
    def from_settings(cls, eff) -> Thresholds:
        return cls(**{k: getattr(eff, k) for k in cls.__fields__ if hasattr(eff, k)})


def _valid(xs):
    return [x for x in xs if x is not None]


def _mean(xs) -> float | None:
    v = _valid(xs)
    return round(sum(v) / len(v), 1) if v else None


def median(xs) -> float | None:
    """The median of the readable values (None: none); not statistics.median, whose imports the epilog would pay."""
    v = sorted(_valid(xs))
    if not v:
        return None
    m = len(v) // 2
    return round(v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2, 1)


def clock_reasons(masks) -> dict[str, float]:
    """Clock event reason bitmasks -> {reason: share of the readable samples it was active in}, Idle left out
    (an idle GPU says so by itself); names as nvidia-smi's --query-gpu (clocks.REASONS)."""
    from ..health.checks.clocks import REASONS

    v = _valid(masks)
    out: dict[str, float] = {}
    for name, (_label, bit) in REASONS.items():
        n = sum(1 for m in v if m & bit)
        if n and name != "gpu_idle":
            out[name] = round(n / len(v), 2)
    return out


def interval_of(g: GpuSeries, default: float | None) -> float | None:
    ts = _valid(g.t)
    if len(ts) >= 2:
        diffs = sorted(b - a for a, b in zip(ts, ts[1:]) if b > a)
        if diffs:
            return diffs[len(diffs) // 2]
    return default


def _hung_run(g: GpuSeries, th: Thresholds, limit: float | None) -> int:
    """The longest run of consecutive samples at high utilisation and low power."""
    if not limit:
        return 0
    best = run = 0
    for u, p in zip(g.util, g.power):
        if u is not None and p is not None and u >= th.hung_util_pct and p < th.hung_power_ratio * limit:
            run += 1
            best = max(best, run)
        elif u is not None:
            run = 0
    return best


def _suspect(g: GpuSeries, th: Thresholds, utils: list, hung_n: int, limit: float | None) -> str | None:
    """Why this GPU looks hung though no duration can be judged: every sample has the signature."""
    if hung_n and hung_n == len(utils):
        return (
            f"{hung_n} sample(s) at >= {th.hung_util_pct:g} % utilisation below {th.hung_power_ratio:g} x "
            f"{limit:g} W (a spin-waiting collective looks like this; no duration to judge it hung)"
        )
    sm = _mean(g.sm_active)
    if sm is not None and sm < th.sm_low_active_pct and min(utils) >= th.hung_util_pct:
        return (
            f"{len(utils)} sample(s) at >= {th.hung_util_pct:g} % utilisation with {sm:g} % SM activity "
            f"(< {th.sm_low_active_pct:g} %; no duration to judge it hung)"
        )
    return None


def gpu_summary(g: GpuSeries, th: Thresholds, *, interval: float | None, power_limit: float | None = None) -> dict:
    utils = _valid(g.util)
    mems = _valid(g.mem_used)
    pows = _valid(g.power)
    limit = g.power_limit or power_limit
    dt = interval_of(g, interval)
    s: dict[str, Any] = {
        "index": g.index if g.index is not None else g.key,
        "uuid": g.uuid,
        "name": g.name,
        "samples": len(utils),
        "util_mean": round(sum(utils) / len(utils), 1) if utils else None,
        "util_max": max(utils) if utils else None,
        "mem_used_mib_max": max(mems) if mems else None,
        "mem_total_mib": g.mem_total,
        "power_mean_w": round(sum(pows) / len(pows), 1) if pows else None,
        "power_limit_w": limit,
        "util_median": median(utils),
        "power_median_w": median(pows),
        "sm_clock_median_mhz": median(g.sm_clock),
        "clock_reasons": clock_reasons(g.reasons) or None,
        "sm_active_mean": _mean(g.sm_active),
        "tensor_active_mean": _mean(g.tensor_active),
        "dram_active_mean": _mean(g.dram_active),
        "profile_samples": len(_valid(g.sm_active)),
        "idle_minutes": None,
        "processes": g.processes or None,
    }
    idle_n = sum(1 for u in utils if u <= th.idle_util_pct)
    if dt:
        s["idle_minutes"] = round(idle_n * dt / 60.0, 2)
    hung_n = _hung_run(g, th, limit)
    hung_s = hung_n * dt if dt else None
    if not utils:
        why = (
            "MIG: the slice reports no utilisation"
            if g.mig
            else "no utilisation in this capture" + (" (a process list)" if g.processes else "")
        )
        s.update(state="unknown", evidence=why)
    elif (hung_s is None or len(utils) < th.min_samples) and (suspect := _suspect(g, th, utils, hung_n, limit)):
        s.update(state="suspect-hung", evidence=suspect)
    elif len(utils) < th.min_samples:
        s.update(state="unknown", evidence=f"{len(utils)} sample(s), fewer than min_samples={th.min_samples}")
    elif hung_s is not None and hung_s >= th.hung_seconds:
        s.update(
            state="hung",
            evidence=f"{hung_n} samples ({hung_s / 60:.1f} min) at >= {th.hung_util_pct:g} % "
            f"utilisation below {th.hung_power_ratio:g} x {limit:g} W",
        )
    elif idle_n >= th.idle_fraction * len(utils):
        held = s["mem_used_mib_max"]
        s.update(
            state="idle",
            evidence=f"{idle_n} of {len(utils)} samples at <= {th.idle_util_pct:g} %"
            + (f", {held:g} MiB held" if held and held >= th.held_memory_mib else ""),
        )
    elif s["util_mean"] < th.underused_util_pct:
        s.update(state="underused", evidence=f"mean {s['util_mean']:g} % < {th.underused_util_pct:g} %")
    else:
        s.update(state="busy", evidence=f"mean {s['util_mean']:g} %")
    if hung_n and s["state"] not in ("hung", "suspect-hung") and hung_s is None:
        s["evidence"] += f"; {hung_n} samples at high utilisation and low power (interval unknown: not judged hung)"
    return s


def low_sm(g: dict, th: Thresholds) -> bool:
    """High utilisation, low SM activity, each from enough samples (DCGM present)."""
    u, sm = g.get("util_mean"), g.get("sm_active_mean")
    return (
        u is not None
        and sm is not None
        and g.get("samples", 0) >= th.min_samples
        and g.get("profile_samples", 0) >= th.min_samples
        and u >= th.sm_busy_util_pct
        and sm < th.sm_low_active_pct
    )


def job_verdict(states: list[str]) -> str:
    if not states:
        return "unknown"
    return min(states, key=STATES.index)


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:g} MiB"


def next_steps(gpus: list[dict], verdict: str, th: Thresholds | None = None) -> list[str]:
    """What to do next, in the words of the job's owner."""
    out = []
    n = len(gpus)
    idle = [g for g in gpus if g["state"] == "idle"]
    for g in idle:
        held = g.get("mem_used_mib_max")
        if n > 1 and len(idle) < n:
            used = n - len(idle)
            out.append(
                f"GPU {g['index']} held {_gib(held or 0)} at {g['util_mean'] or 0:g} %: the job asked for {n} "
                f"GPUs and used {used}" + ("" if held and held >= 1024 else " (it did not even hold memory)")
            )
        else:
            out.append(
                f"GPU {g['index']} sat at {g['util_mean'] or 0:g} % utilisation"
                + (f" holding {_gib(held)}" if held else "")
                + ": is the job waiting on something (input, a lock, a debugger), or not using the GPU?"
            )
    for g in gpus:
        if g["state"] == "suspect-hung":
            out.append(
                f"GPU {g['index']}: {g['evidence']}: sample it again (nvidia-smi --query-gpu=index,"
                "utilization.gpu,power.draw,power.limit --format=csv -l 10); if it stays so, take py-spy dump / "
                "NCCL_DEBUG=INFO stacks"
            )
        elif g["state"] == "hung":
            out.append(
                f"GPU {g['index']}: {g['evidence']}: a stuck collective (NCCL) or a spin-wait looks like this; "
                "take py-spy dump / NCCL_DEBUG=INFO stacks and cancel the job"
            )
        elif g["state"] == "underused":
            out.append(
                f"GPU {g['index']} averaged {g['util_mean']:g} %: likely data-starved (more DataLoader workers, "
                "pinned memory, a larger batch) or CPU-bound"
            )
    for g in gpus:
        if th is not None and g["state"] not in ("hung", "suspect-hung") and low_sm(g, th):
            out.append(
                f"GPU {g['index']} is busy running little ({g['sm_active_mean']:g} % SM activity): small "
                "kernels or a launch-bound loop (a larger batch, CUDA graphs, torch.compile); profile it with "
                "Nsight Systems"
            )
    if verdict == "unknown" and not out:
        out.append(
            "not enough data for a verdict: run longer, lower efficiency.interval, or capture with "
            "`nvidia-smi --query-gpu=index,utilization.gpu,memory.used,power.draw,power.limit --format=csv -l 10`"
        )
    return out


def summarize(cap: Capture, th: Thresholds, *, interval: float | None = None, power_limit: float | None = None) -> dict:
    """The report every efficiency command prints: per-GPU summaries, the job's verdict, findings, next steps."""
    gpus = [gpu_summary(g, th, interval=interval or cap.interval, power_limit=power_limit) for g in cap.gpus.values()]
    verdict = job_verdict([g["state"] for g in gpus])
    findings = [f.as_dict() for f in cap.findings]
    for g in gpus:
        if g["state"] != "busy":
            findings.append(
                {
                    "severity": "warn" if g["state"] in ("idle", "hung", "suspect-hung", "underused") else "info",
                    "gpu": g["index"],
                    "line": None,
                    "text": f"GPU {g['index']} {g['state']}: {g['evidence']}",
                }
            )
        if low_sm(g, th):
            findings.append(
                {
                    "severity": "warn",
                    "gpu": g["index"],
                    "line": None,
                    "text": f"GPU {g['index']}: {g['util_mean']:g}% utilisation but "
                    f"{g['sm_active_mean']:g}% SM activity"
                    + (
                        f", {g['tensor_active_mean']:g}% tensor activity"
                        if g.get("tensor_active_mean") is not None
                        else ""
                    ),
                }
            )
    if cap.snapshot and gpus:
        findings.append(
            {
                "severity": "info",
                "gpu": None,
                "line": None,
                "text": "one sample per GPU: a moment, not the job's history",
            }
        )
    return {
        "format": cap.format,
        "gpus": gpus,
        "verdict": verdict,
        "findings": findings,
        "next_steps": next_steps(gpus, verdict, th),
    }
