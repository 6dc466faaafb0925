#!/usr/bin/env python3
"""Is parsing `nvidia-smi topo -m` a slow part of a prolog? Compare it with starting the Python interpreter.

    .venv/bin/python bench/bench_topo.py [--rounds 15]

Input: a SYNTHETIC 16 GPU x 32 NIC matrix in nvidia-smi's tab layout (NV18 between GPUs, each GPU PIX to two NICs,
NODE within its socket, SYS across; CPU/NUMA affinity and GPU NUMA ID columns; Legend and NIC Legend), bigger than
any real node today. Measured side by side in the same rounds, interleaved, medians reported, because the machine
is shared and noisy:
  - interpreter: `python -c pass` (the floor any Python prolog pays)
  - import: `python -c "import slurmkit.topology"` minus the interpreter start
  - parse: parse_topo() on the text, in process
  - parse+plan: parse_topo() + to_profile() + plan_binding(gpus_per_task=2)
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmkit.topology import parse_topo, plan_binding  # noqa: E402

N_GPU, N_NIC = 16, 32


def synthetic_topo(n_gpu: int = N_GPU, n_nic: int = N_NIC) -> str:
    cols = [f"GPU{i}" for i in range(n_gpu)] + [f"NIC{i}" for i in range(n_nic)]
    half_g, half_n = n_gpu // 2, n_nic // 2

    def sock(c):
        return (int(c[3:]) >= half_g) if c.startswith("GPU") else (int(c[3:]) >= half_n)

    def link(a, b):
        if a == b:
            return " X "
        if a.startswith("GPU") and b.startswith("GPU"):
            return "NV18"
        g, n = (a, b) if a.startswith("GPU") else (b, a)
        if g.startswith("GPU") and n.startswith("NIC") and int(n[3:]) // 2 == int(g[3:]):
            return "PIX"
        if a.startswith("NIC") and b.startswith("NIC") and int(a[3:]) // 2 == int(b[3:]) // 2:
            return "PIX"
        return "NODE" if sock(a) == sock(b) else "SYS"

    lines = ["\t" + "\t".join(cols) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for r in cols:
        row = [r] + [link(r, c) for c in cols]
        if r.startswith("GPU"):
            s = sock(r)
            row += ["0-55,112-167" if not s else "56-111,168-223", str(int(s)), "", "N/A"]
        lines.append("\t".join(row))
    lines += ["", "Legend:", "", "  X    = Self", "  SYS  = Connection traversing PCIe as well as the SMP interconnect",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks", "", "NIC Legend:", ""]
    lines += [f"  NIC{i}: mlx5_{i}" for i in range(n_nic)]
    return "\n".join(lines) + "\n"


def t_subprocess(argv) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t


def t_inproc(fn, reps) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    text = synthetic_topo()
    topo = parse_topo(text, path="synthetic")
    assert len(topo.gpus) == N_GPU and len(topo.nics) == N_NIC and topo.interconnect == "nvlink"
    root = str(Path(__file__).resolve().parent.parent)
    interp, imp, parse, plan = [], [], [], []
    for _ in range(a.rounds):
        interp.append(t_subprocess([sys.executable, "-c", "pass"]))
        imp.append(t_subprocess([sys.executable, "-c", f"import sys; sys.path.insert(0, {root!r}); "
                                                       f"import slurmkit.topology"]))
        parse.append(t_inproc(lambda: parse_topo(text), 5))
        plan.append(t_inproc(lambda: plan_binding(parse_topo(text).to_profile(), 2), 5))
    mi, mm, mp, mb = (statistics.median(x) for x in (interp, imp, parse, plan))
    imp_only = max(mm - mi, 0.0)
    print(f"input: synthetic {N_GPU} GPU x {N_NIC} NIC `nvidia-smi topo -m`, {len(text)} bytes, "
          f"{len(text.splitlines())} lines; {a.rounds} rounds, medians")
    print(f"python -c pass (interpreter start): {mi * 1e3:8.2f} ms   1.00x")
    print(f"import slurmkit.topology          : {imp_only * 1e3:8.2f} ms   {imp_only / mi:5.2f}x interpreter start")
    print(f"parse_topo                        : {mp * 1e3:8.2f} ms   {mp / mi:5.2f}x interpreter start")
    print(f"parse_topo + profile + plan_binding: {mb * 1e3:7.2f} ms   {mb / mi:5.2f}x interpreter start")


if __name__ == "__main__":
    main()
