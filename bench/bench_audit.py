#!/usr/bin/env python3
"""Benchmark: `slurmkit audit` over a synthetic `scontrol -o show node` capture of 1,000 and 10,000 nodes.

    .venv/bin/python bench/bench_audit.py [--repeat 5]

The capture is SYNTHETIC, generated here in the layout of the real dev-cluster capture
(tests/fixtures/local/dev-cluster-slurm22.05-scontrol-o-d-show-node-mixed-drain.txt): 8 GPUs a node, ~9% of nodes
out of service (slurmkit Xid/ECC drains, admins, Prolog error, Kill task failed, Not responding), plus a health log
with one record per slurmkit drain and healthy records for other nodes. Measured side by side in one run: parse +
classify + evidence + summary in process (best of --repeat), and the CLI end to end (`slurmkit audit --from-file
--json`, interpreter start included). Target: 10k nodes under 1 s, and linear (10k/1k time ratio near 10).
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LINE = ("NodeName={name} Arch=x86_64 CoresPerSocket=32  CPUAlloc={alloc} CPUEfctv=128 CPUTot=128 CPULoad=3.21 "
        "AvailableFeatures=h100,ib ActiveFeatures=h100,ib Gres=gpu:h100:8(S:0-1) GresDrain=N/A "
        "GresUsed=gpu:h100:{used}(IDX:{idx}) NodeAddr={name} NodeHostName={name} Version=22.05.8 "
        "OS=Linux 6.1.0-27-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.115-1 (2024-11-01)  RealMemory=2000000 "
        "AllocMem=0 FreeMem=1900000 Sockets=2 Boards=1 State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 "
        "Owner=N/A MCS_label=N/A Partitions={parts}  BootTime=2026-11-01T08:00:00 "
        "SlurmdStartTime=2026-11-01T08:01:00 LastBusyTime=2026-11-30T09:00:00 "
        "CfgTRES=cpu=128,mem=2000000M,billing=128,gres/gpu=8 AllocTRES=cpu={alloc},gres/gpu={used} CapWatts=n/a "
        "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s{reason}")

OUT = [  # (weight, state, reason, user)
    (30, "IDLE+DRAIN", "slurmkit:xid79 GPU 0000:{bus}:00 fell off the bus", "root"),
    (10, "MIXED+DRAIN", "slurmkit:ecc row remapping pending on GPU {gpu}", "root"),
    (15, "IDLE+DRAIN", "admin: ticket {n} PSU swap", "alice"),
    (15, "IDLE+DRAIN", "Prolog error", "slurm"),
    (10, "IDLE+DRAIN", "Kill task failed", "slurm"),
    (10, "DOWN+NOT_RESPONDING", "Not responding", "slurm"),
]


def synth(n: int, seed: int = 8) -> tuple[str, list[dict]]:
    rnd = random.Random(seed)
    now = datetime(2026, 11, 30, 12, 0, 0)
    lines, health = [], []
    weights = [w for w, *_ in OUT]
    for i in range(n):
        name = f"gpu{i:05d}"
        parts = "h100,all" if i % 2 else "h100"
        if rnd.random() < 0.09:
            _, state, reason, user = rnd.choices(OUT, weights)[0]
            reason = reason.format(bus=f"{rnd.randrange(256):02x}", gpu=rnd.randrange(8), n=rnd.randrange(9999))
            when = now - timedelta(minutes=rnd.randrange(60 * 24 * 14))
            used = 3 if state.startswith("MIXED") else 0
            lines.append(LINE.format(name=name, alloc=used * 16, used=used, idx="0-2" if used else "N/A",
                                     state=state, parts=parts,
                                     reason=f" Reason={reason} [{user}@{when:%Y-%m-%dT%H:%M:%S}]"))
            if reason.startswith("slurmkit:"):
                t = (when - timedelta(seconds=2)).replace(tzinfo=timezone.utc)
                health.append({"time": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "node": name, "context": "prolog",
                               "job_id": i, "check": reason.split()[0][9:].rstrip("0123456789"), "status": "fail",
                               "reason": reason, "evidence": {"line": "NVRM: Xid (PCI:0000:3b:00): 79"},
                               "action": "drained"})
        else:
            used = rnd.choice([0, 0, 8, 4])
            state = "IDLE" if used == 0 else ("ALLOCATED" if used == 8 else "MIXED")
            lines.append(LINE.format(name=name, alloc=used * 16, used=used, idx=f"0-{used - 1}" if used else "N/A",
                                     state=state, parts=parts, reason=""))
            if i % 10 == 0:
                health.append({"time": "2026-11-30T09:00:00Z", "node": name, "context": "prolog", "job_id": i,
                               "check": "xid", "status": "ok", "reason": "", "evidence": {}, "action": "none"})
    return "\n".join(lines) + "\n", health


def in_process(text: str, health: list[dict], repeat: int) -> tuple[float, dict]:
    from slurmkit import audit as A
    from slurmkit.slurm.capture import parse_node_capture
    table = A.load_causes()
    now = datetime(2026, 11, 30, 12, 0, 0).astimezone()
    best, summary = float("inf"), {}
    for _ in range(repeat):
        t = time.perf_counter()
        kind, recs = parse_node_capture(text)
        entries = A.audit(recs, table=table, prefix="slurmkit:", now=now, health=A.index_health_log(health))
        summary = A.summarize(entries, price_per_gpu_hour=2.5)
        best = min(best, time.perf_counter() - t)
    return best, summary


def cli(path: Path, cfg: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", str(cfg), "audit", "--json",
                            "--from-file", str(path), "--now", "2026-11-30T12:00:00"], capture_output=True, text=True,
                           cwd=REPO)
        best = min(best, time.perf_counter() - t)
        if r.returncode not in (0, 1):
            sys.exit(f"audit failed: {r.stderr}")
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as d:
        rows = {}
        for n in (1000, 10000):
            text, health = synth(n)
            cap = Path(d) / f"synthetic-scontrol-o-{n}.txt"
            cap.write_text(text)
            log = Path(d) / f"health-{n}.jsonl"
            log.write_text("".join(json.dumps(r) + "\n" for r in health))
            cfg = Path(d) / f"cfg-{n}.yaml"
            cfg.write_text(f"paths:\n  health_log: {log}\naudit:\n  price_per_gpu_hour: 2.5\n")
            t_core, summary = in_process(text, health, a.repeat)
            t_cli = cli(cap, cfg, a.repeat)
            rows[n] = (t_core, t_cli, summary)
            print(f"{n:>6} nodes ({len(text) / 1e6:.1f} MB, {summary['nodes']} out of service, "
                  f"{len(health)} health records): in process {t_core * 1000:7.1f} ms   "
                  f"CLI end to end {t_cli * 1000:7.1f} ms")
        c1, l1, _ = rows[1000]
        c10, l10, _ = rows[10000]
        print(f"ratio 10k/1k: in process {c10 / c1:.2f}x, CLI {l10 / l1:.2f}x (linear = 10x; the CLI's fixed start "
              f"cost makes its ratio smaller)")
        print(f"10k nodes end to end: {l10:.2f} s (target < 1 s): {'met' if l10 < 1.0 else 'MISSED'}")
        print(f"per node in process: 1k {c1 / 1000 * 1e6:.1f} us, 10k {c10 / 10000 * 1e6:.1f} us")


if __name__ == "__main__":
    main()
