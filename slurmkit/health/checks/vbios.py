"""vbios: one VBIOS across a node's GPUs of one model, and the versions the site pins. A GPU that came back from an
RMA, or missed a firmware update, runs other firmware than its neighbours (gcm's `vbios_mismatch`); a job that spans
them meets two firmware behaviours. Input: `nvidia-smi -q` (each GPU's `Product Name` and `VBIOS Version`) or
`--query-gpu` CSV with `name` (or `gpu_name`) and `vbios_version` columns.

GPUs of one model with different VBIOS versions: `vbios.mismatch` (warn by default: the GPUs work, the fleet
drifted). A version outside `vbios.versions` for its model (a map of model -> allowed versions; "*" for every
model): fails (the site said what it runs)."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, is_na, live_unreadable
from ..context import NoData

NAME = "vbios"


def _text(v) -> str | None:
    return v.strip() if isinstance(v, str) and v.strip() and not is_na(v) else None


def rows(text: str) -> list[tuple[str, str | None, str]]:
    """[(gpu, model, vbios)] of every GPU that reads a VBIOS version; a pasted `[...]` row is no GPU."""
    out: list[tuple[str, str | None, str]] = []
    if nvsmi.looks_like_csv(text):
        for i, r in enumerate(nvsmi.parse_csv(text)):
            v = _text(r.get("vbios_version"))
            if v is None or v == "[...]":
                continue
            gid = nvsmi.short_bus(r.get("pci.bus_id") or r.get("gpu_bus_id")) or r.get("index") or str(i)
            out.append((gid, _text(r.get("name") or r.get("gpu_name")), v))
        return out
    q = nvsmi.parse_q(text)
    for i, g in enumerate(q["gpus"]):
        v = _text(g["tree"].get_ci("VBIOS Version"))
        if v is not None:
            out.append((nvsmi.short_bus(g["bus_id"]) or str(i), _text(g["tree"].get_ci("Product Name")), v))
    return out


def _allowed(table: dict[str, list[str]], model: str | None) -> list[str]:
    if model:
        for k, v in table.items():
            if k.lower() == model.lower():
                return v
    return table.get("*", [])


def evaluate(text: str, s) -> Result:
    if not nvsmi.looks_like_csv(text):
        q = nvsmi.parse_q(text)
        if not q["gpus"] and q["errors"]:
            return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code=NAME)
    read = rows(text)
    if not read:
        raise NoData(
            "no VBIOS version in this input (expected `nvidia-smi -q` with `VBIOS Version` per GPU, or "
            "--query-gpu CSV with a vbios_version column)"
        )
    by_model: dict[str, dict[str, list[str]]] = {}
    for gid, model, v in read:
        by_model.setdefault(model or "?", {}).setdefault(v, []).append(gid)
    fails: list[str] = []
    drift: list[str] = []
    for gid, model, v in read:
        allowed = _allowed(s.versions, model)
        if allowed and v not in allowed:
            fails.append(f"GPU {gid}: VBIOS {v} not in {', '.join(allowed)} for {model or 'this GPU'}")
    for model, versions in by_model.items():
        if len(versions) > 1:
            # the version most GPUs run is the node's; the others are named
            common = max(versions, key=lambda v: (len(versions[v]), v))
            odd = [f"GPU {g} {v}" for v, gs in sorted(versions.items()) if v != common for g in gs]
            drift.append(f"{model}: VBIOS {common} on {len(versions[common])} GPUs, {', '.join(odd)}")
    ev: dict = {"gpus": [{"gpu": g, "model": m, "vbios": v} for g, m, v in read]}
    if drift:
        ev["mismatch"] = drift
    if fails or (drift and s.mismatch == "fail"):
        return Result(NAME, "fail", "; ".join(fails + (drift if s.mismatch == "fail" else [])), ev, code=NAME)
    if drift:
        return Result(NAME, "warn", "; ".join(drift), ev, code=NAME)
    seen = sorted({v for _, _, v in read})
    return Result(NAME, "ok", f"{len(read)} GPUs: VBIOS {', '.join(seen)}", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.vbios)
