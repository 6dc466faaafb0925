"""The NCCL pairs sweep's report (`slurmkit health --pairs-report`): the pairs a sweep submitted (its plan.json in
the pairs directory), each pair's all_reduce_perf output beside it (`<a>+<b>.out`), judged by pairs.judge, with
the switch ports of every bad pair when an ibnetdiscover capture is given. Reading files is the edge; the verdict
and the document are pure."""

from __future__ import annotations

import json
import os

from ..errors import UsageError
from . import pairs
from .sweep import pair_output

PLAN = "plan.json"
OUTPUT_LIMIT = 16 * 1024 * 1024  # an all_reduce_perf output is some kB; NCCL_DEBUG=INFO on 16 GPUs, a few MB


def write_plan(out_dir: str, plan: list[tuple[str, str]], pairing: str, jobs: dict[str, int | None]) -> None:
    from ..files import atomic_write

    doc = {"pairing": pairing, "pairs": [list(p) for p in plan], "jobs": jobs}
    atomic_write(os.path.join(out_dir, PLAN), json.dumps(doc, indent=1) + "\n")


def read_plan(out_dir: str) -> tuple[list[tuple[str, str]], dict]:
    from ..bounded import read_text

    path = os.path.join(out_dir, PLAN)
    if not os.path.exists(path):
        raise UsageError(
            f"no pairs sweep here (no {PLAN}): run `slurmkit health --sweep ... --checks nccl-pairs`", path=path
        )
    try:
        doc = json.loads(read_text(path, limit=OUTPUT_LIMIT, what="pairs plan"))
        plan = [(str(a), str(b)) for a, b in doc["pairs"]]
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"not a pairs sweep plan: {e}", path=path) from None
    if not plan:
        raise UsageError("the plan lists no pairs", path=path)
    return plan, doc


def gather(out_dir: str) -> tuple[list[pairs.PairResult], dict]:
    """Each planned pair's result from its output file (none: missing)."""
    from ..bounded import read_text

    plan, doc = read_plan(out_dir)
    results = []
    for a, b in plan:
        path = pair_output(out_dir, a, b)
        text = read_text(path, limit=OUTPUT_LIMIT, what="all_reduce_perf output") if os.path.exists(path) else None
        results.append(pairs.result(a, b, text, path))
    return results, doc


def document(v: pairs.Verdict, fabric=None) -> dict:
    """The report's JSON (docs/check.md#nccl-pairs): the verdict, with `ports` on each bad pair given a fabric."""
    bad_pairs = []
    for bp in v.bad_pairs:
        entry = dict(bp)
        if fabric is not None:
            from ..fabric.paths import between

            entry["ports"] = between(fabric, bp["a"], bp["b"])
        bad_pairs.append(entry)
    return {
        "reference_gbps": v.reference,
        "reference_source": v.reference_source,
        "threshold_gbps": v.threshold,
        "pairs": v.pairs,
        "bad_nodes": v.bad_nodes,
        "bad_pairs": bad_pairs,
        "unknown": v.unknown,
        "ok": v.ok,
    }


def text_lines(doc: dict) -> list[str]:
    out = []
    for p in doc["pairs"]:
        bw = f"{p['busbw']:g} GB/s" if p["busbw"] is not None else "-"
        out.append(f"pair {p['a']}-{p['b']}: {p['status']} ({bw})" + ("" if p["status"] == "ok" else f": {p['why']}"))
    for n in doc["bad_nodes"]:
        out.append(f"node {n['node']}: {n['why']}")
    for bp in doc["bad_pairs"]:
        out.append(f"pair {bp['a']}-{bp['b']} {bp['status']}, its nodes fine with other partners: {bp['why']}")
        ports = bp.get("ports")
        if ports:
            for s in ports["host_ports"]:
                out.append(f"  host port: {s}")
            for s in ports["uplinks"]:
                out.append(f"  uplink: {s}")
            for h in ports["unknown"]:
                out.append(f"  {h}: not on the fabric capture")
    for u in doc["unknown"]:
        out.append(f"unknown: {u}")
    return out


def exit_code(doc: dict) -> int:
    """1 a bad node or pair; 3 nothing bad but something could not be found out; 0 every pair ok."""
    if doc["bad_nodes"] or doc["bad_pairs"]:
        return 1
    return 3 if doc["unknown"] else 0
