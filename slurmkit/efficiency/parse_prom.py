"""dcgm-exporter's `/metrics` text (Prometheus exposition format) -> a Capture: one sample per GPU, or per MIG
instance (rows with GPU_I_ID: "GPU 0 GI 3"), per scrape.

What is read: DCGM_FI_DEV_GPU_UTIL (%) as utilisation, else DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio, as %);
DCGM_FI_PROF_SM_ACTIVE, _PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE (ratios, as %); DCGM_FI_DEV_POWER_USAGE (W);
DCGM_FI_DEV_FB_USED (MiB). Other families (PCIe bytes, clocks, temperatures, the exporter's own) are skipped.
`# HELP` / `# TYPE` lines may be there or not. Older exporters say "(in %)" in HELP while the values are ratios:
the values decide, and a ratio above 1 is refused with its line, as is a line that is not a metric. Several
scrapes one after another (a metric seen again for the same GPU) are several samples; a trailing timestamp (ms)
is the sample's time. A capture holding more than one host's metrics is refused: GPU 0 of two hosts is two GPUs.
Standard library only.
"""

from __future__ import annotations

import math
import re

from ..errors import UsageError
from .cells import MAX_VALUE, PERCENT, number
from .model import Capture

# family -> (the sample's attribute, scale to %/W/MiB, largest value read as a measurement)
METRICS = {
    "DCGM_FI_DEV_GPU_UTIL": ("util", 1.0, PERCENT),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_active", 100.0, 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 100.0, 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 100.0, 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 100.0, 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power", 1.0, MAX_VALUE),
    "DCGM_FI_DEV_FB_USED": ("mem_used", 1.0, MAX_VALUE),
}
MAX_LABELS = 64

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d{1,16}))?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def looks_like(first: str) -> bool:
    """The first non-blank line of a dcgm-exporter scrape (detect())."""
    return first.startswith(("# HELP DCGM_", "# TYPE DCGM_", "DCGM_"))


def labels(text: str, *, path: str, line: int) -> dict[str, str]:
    """'gpu="0",UUID="GPU-..."' -> {"gpu": "0", "UUID": "GPU-..."} (pure); anything else is bad input."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text) and text[pos:].strip():
        m = _LABEL.match(text, pos)
        if m is None:
            raise UsageError(f"cannot read the labels at {text[pos : pos + 40]!r}", path=path, line=line)
        out[m[1]] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e[0]], m[2])
        pos = m.end()
        if len(out) > MAX_LABELS:
            raise UsageError(f"more than {MAX_LABELS} labels on one metric", path=path, line=line)
    return out


def _value(cell: str, *, path: str, line: int, field: str, hi: float) -> float | None:
    if cell in ("NaN", "+Inf", "-Inf"):
        return None  # the exporter had no reading (a blank field): not a 0
    return number(cell, path=path, line=line, field=field, hi=hi)


def parse_dcgm_exporter(text: str, *, path: str = "<capture>") -> Capture:
    cap = Capture(format="dcgm-exporter")
    samples: dict[int | str, list[dict]] = {}  # GPU key -> its samples, in order
    hosts: dict[str, int] = {}
    skipped: set[str] = set()
    no_gpu = 0
    profiles: dict[int | str, str] = {}  # MIG instance -> its GPU_I_PROFILE
    for i, raw in enumerate(text.splitlines(), 1):
        ln = raw.strip()
        if not ln or ln.startswith("#"):
            continue
        m = _LINE.match(ln)
        if m is None:
            raise UsageError("expected a metric line 'NAME{labels} VALUE [TIMESTAMP]'", path=path, line=i)
        name, lab, cell, ts = m[1], labels(m[2] or "", path=path, line=i), m[3], m[4]
        if name not in METRICS:
            skipped.add(name)
            continue
        if "gpu" not in lab or not lab["gpu"].isdigit():
            no_gpu += 1
            continue
        host = lab.get("Hostname", "")
        hosts.setdefault(host, i)
        if len(hosts) > 1:
            raise UsageError(
                f"metrics of more than one host in one capture ({', '.join(h or '(none)' for h in hosts)}): give "
                "one host's scrape",
                path=path,
                line=i,
            )
        gpu, gi = int(lab["gpu"]), lab.get("GPU_I_ID")
        key: int | str = gpu if gi is None else f"{gpu} GI {gi}"  # shown as "GPU 0 GI 3"
        g = cap.gpus.get(key)
        if g is None:
            g = cap.gpu(key, index=gpu if gi is None else None, uuid=lab.get("UUID"), name=lab.get("modelName"))
            g.mig = gi is not None
            if g.mig:
                profiles[key] = lab.get("GPU_I_PROFILE") or "profile unknown"
        attr, scale, hi = METRICS[name]
        v = _value(cell, path=path, line=i, field=name, hi=hi)
        rows = samples.setdefault(key, [{}])
        if attr in rows[-1]:  # seen already for this GPU: the next scrape
            rows.append({})
        rows[-1][attr] = None if v is None else v * scale
        if ts is not None:
            rows[-1]["t"] = int(ts) / 1000.0
    if not cap.gpus:
        got = f" (it holds {', '.join(sorted(skipped)[:6])})" if skipped else ""
        if no_gpu:
            got += f"; {no_gpu} rows of those metrics carry no gpu label"
        raise UsageError(
            "no metric slurmkit reads from dcgm-exporter (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_*, DCGM_FI_DEV_POWER_USAGE, "
            f"DCGM_FI_DEV_FB_USED){got}",
            path=path,
            line=1,
        )
    for key, rows in samples.items():
        g = cap.gpus[key]
        for s in rows:
            gr = s.pop("gr_active", None)
            if s.get("util") is None and gr is not None and math.isfinite(gr):
                s["util"] = gr  # the graphics engine's busy share: what GPUTL means, where DEV_GPU_UTIL is absent
            g.add(**s)
        if g.mig:
            cap.note(f"GPU {key}: a MIG instance ({profiles[key]}), judged on its own", gpu=key)
    if next(iter(hosts)):
        cap.meta["host"] = next(iter(hosts))
    cap.snapshot = all(len(rows) <= 1 for rows in samples.values())
    return cap
