"""fabric: a GPU's NVLink fabric, as `nvidia-smi -q` reports it in each GPU's "Fabric" section (drivers 550+; the
535 driver prints none). On an NVSwitch system (HGX H100/H200, GB200/GB300 NVL) the fabric manager must have
trained the GPU into the fabric before CUDA can use it: `State` goes Not Started -> In Progress -> Completed, and
`Status` is then Success or the error the fabric manager met ("Insufficient Resources" on an Azure NVL node that
passed a check grepping for N/A). Newer drivers add `Health`: a `Summary` (Healthy, Unhealthy, Limited Capacity)
and its conditions (Bandwidth Degraded, Route Recovery in progress, Route Unhealthy, Access Timeout Recovery,
Incorrect Configuration): a GB200 can read Completed/Success and still be Unhealthy.

A GPU whose Fabric fields all read N/A or Not Supported is not on an NVLink fabric (a PCIe card): nothing to judge.
CliqueId 0 and a zero ClusterUUID are normal on one HGX node; on an NVL rack, where every GPU must belong to the
rack's clique, a site lists `clique_missing` in `fabric.fail_on` (per node class, with `overrides:`). GPUs of one
node in different cliques fail by default. What fails and what warns is `fabric.fail_on` / `fabric.warn_on`."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, is_na, live_unreadable
from ..context import NoData

NAME = "fabric"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# every condition this check can name -> how it reads in a finding
CONDITIONS = {
    "not_ready": "fabric not ready",
    "status_error": "fabric status",
    "unhealthy": "fabric health Unhealthy",
    "route_unhealthy": "Route Unhealthy",
    "incorrect_configuration": "Incorrect Configuration",
    "clique_mismatch": "in another NVLink clique than the node's other GPUs",
    "clique_missing": "in no NVLink clique (CliqueId 0, zero ClusterUUID)",
    "limited_capacity": "fabric health Limited Capacity",
    "bandwidth_degraded": "fabric bandwidth Degraded",
    "route_recovery": "Route Recovery in progress",
    "access_timeout_recovery": "Access Timeout Recovery",
}
_TRUE = ("true", "yes", "active")


def _field(sec, *path: str) -> str | None:
    """A Fabric field's text; None where absent, N/A, [Not Supported] or Not Supported."""
    v = sec.get_ci(*path)
    if not isinstance(v, str) or is_na(v) or v.strip().lower() in ("not supported", "[not supported]"):
        return None
    return v.strip()


def read(tree) -> dict | None:
    """A GPU's `-q` tree -> its Fabric fields ({} when every one is N/A: not on a fabric); None: no such section."""
    sec = tree.get_ci("Fabric")
    if not isinstance(sec, nvsmi.Node):
        return None
    out = {
        "state": _field(sec, "State"),
        "status": _field(sec, "Status"),
        "clique_id": _field(sec, "CliqueId"),
        "cluster_uuid": _field(sec, "ClusterUUID"),
    }
    for key, label in (
        ("summary", "Summary"),
        ("bandwidth", "Bandwidth"),
        ("route_recovery", "Route Recovery in progress"),
        ("route_unhealthy", "Route Unhealthy"),
        ("access_timeout_recovery", "Access Timeout Recovery"),
        ("incorrect_configuration", "Incorrect Configuration"),
    ):
        out[key] = _field(sec, "Health", label)
    return {k: v for k, v in out.items() if v is not None}


def conditions(f: dict) -> list[tuple[str, str]]:
    """One GPU's fabric fields -> [(condition, detail)], the clique rules left to the node-wide pass."""
    out: list[tuple[str, str]] = []
    state = (f.get("state") or "").lower()
    if state == "gpu is lost":  # NVML_ERROR_GPU_IS_LOST in every field: the GPU, not the fabric manager
        out.append(("not_ready", "the GPU is lost (fell off the bus?)"))
    elif f and state != "completed":
        out.append(("not_ready", f"State {f.get('state') or 'unknown'} (is nvidia-fabricmanager running?)"))
    status = f.get("status")
    if state == "completed" and status is not None and status.lower() != "success":
        out.append(("status_error", status))
    summary = (f.get("summary") or "").lower()
    if summary == "unhealthy":
        out.append(("unhealthy", ""))
    elif summary == "limited capacity":
        out.append(("limited_capacity", ""))
    for key in ("route_unhealthy", "route_recovery", "access_timeout_recovery"):
        if (f.get(key) or "").lower() in _TRUE:
            out.append((key, ""))
    if (f.get("bandwidth") or "").lower() == "degraded":
        out.append(("bandwidth_degraded", ""))
    bad_config = f.get("incorrect_configuration")
    if bad_config is not None and bad_config.lower() not in ("none", "false", "no"):
        out.append(("incorrect_configuration", bad_config))
    return out


def _clique(f: dict) -> tuple[str, str] | None:
    """(ClusterUUID, CliqueId) of a GPU on a completed fabric, None otherwise (the zero pair included)."""
    if (f.get("state") or "").lower() != "completed":
        return None
    pair = (f.get("cluster_uuid") or ZERO_UUID, f.get("clique_id") or "0")
    return None if pair == (ZERO_UUID, "0") else pair


def _node_conditions(per: dict[str, dict]) -> dict[str, list[tuple[str, str]]]:
    """The clique rules over a node's GPUs on a completed fabric: `clique_missing` for a GPU in none,
    `clique_mismatch` for a GPU outside the clique most of its node's GPUs are in."""
    done = {gid: f for gid, f in per.items() if (f.get("state") or "").lower() == "completed"}
    out: dict[str, list[tuple[str, str]]] = {gid: [] for gid in per}
    pairs = {gid: _clique(f) for gid, f in done.items()}
    counts: dict[tuple[str, str], int] = {}
    for p in pairs.values():
        if p is not None:
            counts[p] = counts.get(p, 0) + 1
    common = max(counts, key=lambda p: (counts[p], p)) if counts else None
    for gid, p in pairs.items():
        if p is None:
            out[gid].append(("clique_missing", ""))
        elif p != common:
            out[gid].append(("clique_mismatch", f"ClusterUUID {p[0]} clique {p[1]}"))
    return out


def _text(cond: str, detail: str) -> str:
    return f"{CONDITIONS[cond]}{': ' + detail if detail else ''}"


def evaluate(text: str, s) -> Result:
    q = nvsmi.parse_q(text)
    if not q["gpus"] and q["errors"]:
        return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code=NAME)
    per: dict[str, dict] = {}
    for i, g in enumerate(q["gpus"]):
        f = read(g["tree"])
        if f is not None:
            per[nvsmi.short_bus(g["bus_id"]) or str(i)] = f
    if not per:
        raise NoData(
            "no Fabric section in this input (expected `nvidia-smi -q` of driver 550 or later, whose GPU sections "
            "hold one; 535 prints none)"
        )
    node_wide = _node_conditions(per)
    fails: list[str] = []
    warns: list[str] = []
    gpus = []
    for gid, f in per.items():
        found = conditions(f) + node_wide[gid]
        gpus.append({"gpu": gid, **f, "conditions": [c for c, _ in found]})
        fail = [_text(c, d) for c, d in found if c in s.fail_on]
        warn = [_text(c, d) for c, d in found if c in s.warn_on and c not in s.fail_on]
        fails += [f"GPU {gid}: {'; '.join(fail)}"] if fail else []
        warns += [f"GPU {gid}: {'; '.join(warn)}"] if warn else []
    ev: dict = {"gpus": gpus}
    if fails or warns:
        ev["findings"] = fails + warns
    if fails:
        return Result(NAME, "fail", "; ".join(fails) + " (NVLink fabric)", ev, code=NAME)
    if warns:
        return Result(NAME, "warn", "; ".join(warns), ev, code=NAME)
    on = sum(1 for f in per.values() if f)
    if not on:
        return Result(NAME, "ok", f"{len(per)} GPUs: not on an NVLink fabric (Fabric fields N/A)", ev)
    return Result(NAME, "ok", f"{on} GPUs: NVLink fabric Completed, Success", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.fabric)
