"""NCCL between node pairs (issue 33; gcm's pairwise check is the anchor): which pairs to run, and what their
all_reduce_perf outputs say. Pure: pairing, judging each pair's bus bandwidth, and naming the node whose every
pair is slow (a node, not a link, is then the likely cause); a slow pair whose nodes are both fine elsewhere is
the path between them, mapped to its switch ports by slurmkit/fabric/paths.py when a fabric capture is given.

    plan(["n1", "n2", "n3"])                          # ring: (n1,n2) (n2,n3) (n3,n1): each node with two partners
    v = judge([result("n1", "n2", text), ...], expected=None, min_ratio=0.8)   # reference: the best pair

gcm runs every pair (`--pairwise`) or each node once (`--pairwise-quick`); once cannot tell which node of a slow
pair is at fault, so the default here is the ring: n pairs, every node in two with different partners."""

from __future__ import annotations

import itertools
from ..record import Record, field

MODES = ("ring", "all")
# without a site figure the reference is the best pair (not the median: one bad node in a ring of 3 makes 2 of
# its 3 pairs slow, and the median with them); a bandwidth cannot exceed what the links carry, so the best pair is
# what a healthy pair does. One pair is no reference: give nccl.pairs_expected_busbw_gbps
MIN_PAIRS_FOR_REFERENCE = 2


def plan(nodes: list[str], mode: str = "ring") -> list[tuple[str, str]]:
    """The pairs to run, each (a, b) with a < b in the given order's sense kept stable: `ring` pairs each node
    with the next (and the last with the first), `all` every pair. Fewer than 2 distinct nodes: ValueError."""
    uniq = list(dict.fromkeys(nodes))
    if len(uniq) < 2:
        raise ValueError(f"a pairs sweep needs at least 2 nodes, got {len(uniq)}")
    if mode == "all":
        return list(itertools.combinations(uniq, 2))
    if mode != "ring":
        raise ValueError(f"pairing {mode!r}: expected one of {', '.join(MODES)}")
    if len(uniq) == 2:
        return [(uniq[0], uniq[1])]
    return [(uniq[i], uniq[(i + 1) % len(uniq)]) for i in range(len(uniq))]


class PairResult(Record, kw_only=False):
    a: str
    b: str
    busbw: float | None = None  # nccl-tests' "Avg bus bandwidth" (GB/s); None: no figure (see error)
    error: str | None = None  # why there is no figure, or why the figure cannot be trusted
    missing: bool = False  # no output at all (the job did not run or its output is gone): could not find out

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


def result(a: str, b: str, text: str | None, source: str = "") -> PairResult:
    """One pair's result from its all_reduce_perf output (None: there is none). Failures, wrong values, out-of-
    bounds counts, unreadable numbers and output with no bandwidth in it are errors, never a figure."""
    from .nccl import parse

    where = f" ({source})" if source else ""
    if text is None:
        return PairResult(a, b, error=f"no output{where}", missing=True)
    p = parse(text)
    if p["failures"]:
        return PairResult(a, b, error=f"all_reduce_perf failed: {p['failures'][0]}{where}")
    if p["unreadable"]:
        return PairResult(a, b, error=f"unreadable output: {p['unreadable'][0]}{where}")
    if p["wrong"] or p["out_of_bounds"]:
        return PairResult(
            a, b, error=f"wrong results: {p['wrong']} wrong, {p['out_of_bounds'] or 0} out of bounds{where}"
        )
    if p["avg_bus_bandwidth_gbps"] is None:
        n = len(text.splitlines())
        return PairResult(a, b, error=f"no bus bandwidth in {n} line(s) of output{where}")
    return PairResult(a, b, busbw=p["avg_bus_bandwidth_gbps"])


class Verdict(Record, kw_only=False):
    pairs: list[dict] = field(default_factory=list)  # {a, b, busbw, status: ok|slow|failed|missing, why}
    reference: float | None = None  # GB/s the pairs are judged against
    reference_source: str = ""  # "nccl.pairs_expected_busbw_gbps" or "the best of N pairs"
    threshold: float | None = None  # reference * min_ratio
    bad_nodes: list[dict] = field(default_factory=list)  # {node, pairs: [names], why}
    bad_pairs: list[dict] = field(default_factory=list)  # {a, b, status, why}: not explained by a bad node
    unknown: list[str] = field(default_factory=list)  # what could not be found out

    @property
    def ok(self) -> bool:
        return not self.bad_nodes and not self.bad_pairs and not self.unknown


def judge(results: list[PairResult], *, expected: float | None, min_ratio: float) -> Verdict:
    """Each pair ok, slow (busbw < min_ratio x reference), failed or missing; the reference is `expected`, else
    the best readable pair (at least MIN_PAIRS_FOR_REFERENCE of them, else the slow ones cannot be told).
    A node in two or more pairs, every one of them slow or failed, is named; a bad pair whose nodes are not named
    is a bad pair (the path between them); a node in one pair only cannot be told from its partner."""
    v = Verdict()
    figures = [r.busbw for r in results if r.busbw is not None]
    if expected is not None:
        v.reference, v.reference_source = expected, "nccl.pairs_expected_busbw_gbps"
    elif len(figures) >= MIN_PAIRS_FOR_REFERENCE:
        v.reference, v.reference_source = max(figures), f"the best of {len(figures)} pairs"
    else:
        v.unknown.append(
            f"{len(figures)} pair(s) with a bandwidth: too few to judge one by the others "
            f"(at least {MIN_PAIRS_FOR_REFERENCE}); "
            "set nccl.pairs_expected_busbw_gbps to judge them"
        )
    if v.reference is not None:
        v.threshold = round(v.reference * min_ratio, 3)
    bad: dict[str, tuple[str, str]] = {}  # pair name -> (status, why)
    for r in results:
        if r.missing:
            status, why = "missing", r.error or "no output"
            v.unknown.append(f"pair {r.name}: {why}")
        elif r.error is not None:
            status, why = "failed", r.error
        elif v.threshold is not None and r.busbw is not None and r.busbw < v.threshold:
            status = "slow"
            why = f"{r.busbw:g} GB/s < {min_ratio:g} x {v.reference:g} GB/s ({v.reference_source})"
        elif v.threshold is None:
            status, why = "unjudged", f"{r.busbw:g} GB/s (no reference)"
        else:
            status, why = "ok", f"{r.busbw:g} GB/s"
        v.pairs.append({"a": r.a, "b": r.b, "busbw": r.busbw, "status": status, "why": why})
        if status in ("slow", "failed"):
            bad[r.name] = (status, why)
    named = _bad_nodes(results, bad, v)
    for r in results:
        if r.name in bad and r.a not in named and r.b not in named:
            status, why = bad[r.name]
            alone = [n for n in (r.a, r.b) if _pairs_of(results, n) == 1]
            if alone:
                why += f"; {' and '.join(alone)} in no other pair: cannot tell which node (sweep with a third node)"
            v.bad_pairs.append({"a": r.a, "b": r.b, "status": status, "why": why})
    return v


def _pairs_of(results: list[PairResult], node: str) -> int:
    return sum(1 for r in results if not r.missing and node in (r.a, r.b))


def _bad_nodes(results: list[PairResult], bad: dict[str, tuple[str, str]], v: Verdict) -> set[str]:
    nodes = list(dict.fromkeys(n for r in results for n in (r.a, r.b)))
    named = set()
    for n in nodes:
        mine = [r for r in results if not r.missing and n in (r.a, r.b)]
        if len(mine) >= 2 and all(r.name in bad for r in mine):
            named.add(n)
            v.bad_nodes.append(
                {
                    "node": n,
                    "pairs": [r.name for r in mine],
                    "why": f"all {len(mine)} of its pairs are slow or failed: "
                    + "; ".join(f"{r.name} {bad[r.name][1]}" for r in mine),
                }
            )
    return named
