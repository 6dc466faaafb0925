#!/usr/bin/env python3
"""Benchmark: the health log at fleet size.

    .venv/bin/python bench/bench_fleetlog.py [--nodes 10000] [--per-day 3] [--repeat 3]

1. `slurmkit audit --from-file --json` end to end over a SYNTHETIC 10,000-node capture (bench_audit.synth: ~9% of
   nodes out of service, drained up to 14 days ago) with a SYNTHETIC per-node health-log tree (generated here, one
   file per node, rotated generations) holding 30 days of records, against the same audit over 1 day of the same
   tree, side by side. Target: the 30-day run within 1.5x of the 1-day run (audit reads each out-of-service node's
   file back to its drain time, not the log's age). The older single shared file of the same 30 days is timed too,
   to show what the layout change buys.
2. The per-record cost of `healthlog.write` with the Prometheus textfile and syslog on, against both off (ratio).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_audit import synth  # noqa: E402  (the bench directory is not a package)

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)
CHECKS = ("xid", "gpu_count", "ecc", "driver", "pcie", "gpu_procs", "nccl")


def node_lines(node: str, days: int, per_day: int) -> list[str]:
    out = []
    start = NOW - timedelta(days=days)
    step = timedelta(days=1) / per_day
    for k in range(days * per_day):
        t = (start + step * k).strftime("%Y-%m-%dT%H:%M:%SZ")
        out.append(json.dumps({"time": t, "node": node, "context": "prolog", "job_id": k, "check": CHECKS[k % 7],
                               "status": "ok", "reason": "", "evidence": {"gpus": 8}, "action": "none",
                               "seconds": 0.004}))
    return out


def write_tree(d: Path, nodes: list[str], days: int, per_day: int, drains: list[dict], *, max_bytes: int,
               single: Path | None = None) -> int:
    d.mkdir(parents=True)
    by_node: dict[str, list[str]] = {}
    for r in drains:
        if NOW - datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) \
                <= timedelta(days=days):
            by_node.setdefault(r["node"], []).append(json.dumps(r))
    total = 0
    sf = open(single, "w") if single else None
    for n in nodes:
        lines = node_lines(n, days, per_day) + by_node.get(n, [])
        lines.sort(key=lambda x: x[10:30])                 # by time: "time" is the first key
        gens, cur, size = [], [], 0
        for line in lines:
            if size + len(line) + 1 > max_bytes and cur:
                gens.append(cur)
                cur, size = [], 0
            cur.append(line)
            size += len(line) + 1
        gens.append(cur)
        for i, g in enumerate(reversed(gens)):            # newest is <node>.jsonl, then .1, .2, ...
            name = f"{n}.jsonl" + (f".{i}" if i else "")
            (d / name).write_text("\n".join(g) + "\n")
        total += len(lines)
        if sf:
            sf.write("\n".join(lines) + "\n")
    if sf:
        sf.close()
    return total


def audit_cli(cap: Path, cfg: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", str(cfg), "audit", "--json",
                            "--from-file", str(cap), "--now", "2026-11-30T12:00:00"], capture_output=True,
                           text=True, cwd=REPO)
        best = min(best, time.perf_counter() - t)
        if r.returncode not in (0, 1):
            sys.exit(f"audit failed: {r.stderr}")
    return best


def sinks(d: Path, n: int) -> tuple[float, float]:
    from slurmkit import config, healthlog
    off, on = d / "off.yaml", d / "on.yaml"
    off.write_text(f"paths:\n  health_log: {d}/log-off/\n  state_dir: {d}/state-off\n")
    on.write_text(f"paths:\n  health_log: {d}/log-on/\n  state_dir: {d}/state-on\n"
                  f"health:\n  syslog: true\n  textfile_dir: {d}/textfile\n")
    so, sn = config.load(str(off)), config.load(str(on))
    recs = [healthlog.record(check=c, status="ok", context="prolog", node="gpu00001", job_id=1) for c in CHECKS]
    out = []
    for s in (so, sn):
        healthlog.write(s, recs)                          # imports, directories
        t = time.perf_counter()
        for _ in range(n):
            healthlog.write(s, recs)                      # one hook's records in one call, as the hooks do
        out.append((time.perf_counter() - t) / (n * len(recs)))
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--per-day", type=int, default=3, help="records per node per day (synthetic)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fleetlog-") as tmp:
        d = Path(tmp)
        text, drains = synth(a.nodes)
        cap = d / f"synthetic-scontrol-o-{a.nodes}.txt"
        cap.write_text(text)
        nodes = [f"gpu{i:05d}" for i in range(a.nodes)]
        out_of_service = sum(1 for line in text.splitlines() if " Reason=" in line)
        rows = {}
        for days in (1, 30):
            t = time.perf_counter()
            n = write_tree(d / f"tree-{days}d", nodes, days, a.per_day, drains, max_bytes=4096,
                           single=d / f"single-{days}d.jsonl" if days == 30 else None)
            made = time.perf_counter() - t
            cfg = d / f"cfg-{days}.yaml"
            cfg.write_text(f"paths:\n  health_log: {d}/tree-{days}d/\naudit:\n  price_per_gpu_hour: 2.5\n")
            rows[days] = audit_cli(cap, cfg, a.repeat)
            print(f"{days:>2}-day per-node tree: {n:,} records in {a.nodes:,} node files (made in {made:.1f} s); "
                  f"audit end to end {rows[days]:.3f} s")
        cfg = d / "cfg-single.yaml"
        cfg.write_text(f"paths:\n  health_log: {d}/single-30d.jsonl\naudit:\n  price_per_gpu_hour: 2.5\n")
        single = audit_cli(cap, cfg, a.repeat)
        size = os.path.getsize(d / "single-30d.jsonl") / 1e6
        print(f"30-day single shared file ({size:.0f} MB): audit end to end {single:.3f} s")
        ratio = rows[30] / rows[1]
        print(f"{out_of_service} of {a.nodes} nodes out of service")
        print(f"ratio 30-day/1-day, per-node layout: {ratio:.2f}x (target <= 1.5x): "
              f"{'MET' if ratio <= 1.5 else 'NOT MET'}")
        print(f"ratio single file/per-node, 30 days: {single / rows[30]:.2f}x")
        off, on = sinks(d, 300)
        print(f"healthlog.write per record: sinks off {off * 1e6:.1f} us, textfile + syslog on {on * 1e6:.1f} us "
              f"(ratio {on / off:.2f}x)")


if __name__ == "__main__":
    main()
