"""Which format a captured file is, and its parser: `slurmkit efficiency --from-file FILE`."""

from __future__ import annotations

from ..bounded import read_text
from ..errors import UsageError
from . import parse_cols, parse_csv, parse_other, parse_prom
from .cells import refuse_failure
from .model import Capture

FORMATS = (
    "nvidia-smi-csv",
    "nvidia-smi-dmon",
    "nvidia-smi-pmon",
    "dcgmi-dmon",
    "dcgm-exporter",
    "nvidia-smi-table",
    "jobstats",
    "jobstats-json",
    "seff",
    "sacct",
)


PARSERS = {
    "nvidia-smi-dmon": parse_cols.parse_dmon,
    "nvidia-smi-pmon": parse_cols.parse_pmon,
    "dcgmi-dmon": parse_cols.parse_dcgmi,
    "dcgm-exporter": parse_prom.parse_dcgm_exporter,
    "nvidia-smi-table": parse_other.parse_table,
    "jobstats": parse_other.parse_jobstats_text,
    "jobstats-json": parse_other.parse_jobstats_json,
    "seff": parse_other.parse_seff,
    "sacct": parse_other.parse_sacct,
}


def detect(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise UsageError("empty capture")
    first = lines[0].strip()
    if parse_prom.looks_like(first):
        return "dcgm-exporter"
    if first.startswith("#Entity"):
        return "dcgmi-dmon"
    if first.startswith("#"):
        return "nvidia-smi-pmon" if " pid" in first else "nvidia-smi-dmon"
    if first.startswith("{"):
        return "jobstats-json"
    if first.startswith("+--") or "NVIDIA-SMI" in first or first.startswith("|"):
        return "nvidia-smi-table"
    if "Slurm Job Statistics" in text[:2000]:
        return "jobstats"
    if first.startswith("Job ID:") and "Efficiency" in text:
        return "seff"
    if first.startswith("JobID|"):
        return "sacct"
    if "," in first:
        return "nvidia-smi-csv"
    raise UsageError(
        f"unrecognised capture format (first line {first[:80]!r}); expected one of: " + ", ".join(FORMATS), line=1
    )


def _dedent(text: str) -> str:
    """Strip a common leading indent (a report pasted into RST/Markdown keeps its code-block indent)."""
    lines = text.splitlines()
    ind = min((len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()), default=0)
    return "\n".join(ln[ind:] for ln in lines) if ind else text


def parse_text(
    text: str, *, path: str = "<capture>", fmt: str | None = None, fields: list[str] | None = None
) -> Capture:
    text = _dedent(text)
    lines = text.splitlines()
    if fmt not in ("jobstats", "jobstats-json", "seff", "sacct") and "Slurm Job Statistics" not in text[:2000]:
        refuse_failure(lines, path)
    try:
        fmt = fmt or detect(text)
    except UsageError as e:
        raise UsageError(str(e), path=path, line=1) from None
    if fmt == "nvidia-smi-csv":
        cap = parse_csv.parse(text, path=path, fields=fields)
    elif fmt in PARSERS:
        cap = PARSERS[fmt](text, path=path)
    else:
        raise UsageError(f"unknown format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    cap.meta["path"] = path
    return cap


def parse_file(path: str, *, fmt: str | None = None, fields: list[str] | None = None) -> Capture:
    return parse_text(read_text(path, what="capture"), path=path, fmt=fmt, fields=fields)
