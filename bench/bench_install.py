#!/usr/bin/env python3
"""Benchmark `slurmkit install`: 1 node vs N nodes (16), real sshd daemons, in the same run.

    .venv/bin/python bench/bench_install.py [--port 7480] [--rounds 2]                 # sshds on loopback
    .venv/bin/python bench/bench_install.py --netns --nodes 32 --delay-ms 10           # 32 separate hosts

With --netns each node is its own host: a network namespace joined by a veth pair, its sshd on port 22, and a
round trip of 2 x --delay-ms (dev/netfleet.py: tc netem where the kernel has it, else a user-space delay line).

Each round installs to fresh node roots (wheels uploaded, venv built, hooks and config committed) to 1 node and
then to 16 nodes, and reruns both (nothing changes: connect, stat, hash); then the 16 again one at a time
(--parallel 1), to show what the fan-out buys. CPU seconds are split between slurmkit (the admin side) and the
sshds with everything they ran (the node side). Prints the times side by side and the
16/1 ratio (target: at most 3x). All "nodes" share this machine's CPUs, so the node-side work (sshd, the venv
build) of 16 nodes competes for the same cores as slurmkit itself: on real nodes it runs in parallel.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "dev"))
from netfleet import NetFleet, available  # noqa: E402
from sshfleet import Fleet  # noqa: E402


def sshd_cpu(fleet: Fleet) -> float:
    """CPU seconds the fleet's sshds and everything they ran (sessions, sftp-server, the venv builds) used."""
    tot = 0
    for pid in fleet.pids().values():
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tot += sum(int(x) for x in f[11:15])      # utime stime cutime cstime
    return tot / os.sysconf("SC_CLK_TCK")


def relay_cpu(fleet) -> float:
    """CPU seconds of the user-space delay line (netfleet's relay: this test machine's stand-in for the wire)."""
    p = getattr(fleet, "relay", None)
    if p is None or p.poll() is not None:
        return 0.0
    f = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:13]) / os.sysconf("SC_CLK_TCK")


def run(cfg: Path, nodes: str, cpu: dict, *extra: str) -> float:
    r0 = os.times()
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(cfg),
                        "install", "--nodes", nodes, "--json", *extra], capture_output=True, text=True, timeout=600,
                       env={k: v for k, v in os.environ.items() if k not in ("SLURMKIT_CONFIG", "SLURM_CONF")})
    dt = time.monotonic() - t0
    r1 = os.times()
    cpu["client"] = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    if r.returncode != 0:
        raise SystemExit(f"install --nodes {nodes} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=7480, help="first sshd port (16 ports from here)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--netns", action="store_true", help="one network namespace per node (root, iproute2)")
    ap.add_argument("--delay-ms", type=float, default=10.0, help="with --netns: one-way delay per hop")
    ap.add_argument("--venv", choices=("prebuilt", "wheels"), default="prebuilt",
                    help="prebuilt: the venv built once here, one tarball per node (install.prebuilt_venv, the "
                         "default); wheels: every node builds its own from the wheels (the former way)")
    ap.add_argument("--no-sequential", action="store_true", help="skip the --parallel 1 run")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="slurmkit-bench-install-"))
    N = a.nodes
    nodes = [f"b{i:02d}" for i in range(1, N + 1)]
    many_list = f"b[01-{N:02d}]"
    if a.netns:
        why = available()
        if why:
            raise SystemExit(f"--netns: {why}")
        fleet = NetFleet(tmp / "fleet", nodes, block=48, delay_ms=a.delay_ms)
    else:
        fleet = Fleet(tmp / "fleet", nodes, a.port)
    fleet.start()
    where = (f"{N} network-namespace hosts, {2 * a.delay_ms:g} ms round trips ({fleet.delay_kind})" if a.netns
             else f"{N} sshds on loopback")
    print(f"fleet: {where}")
    try:
        cfg = tmp / "site.yaml"
        cfg.write_text("slurm:\n  timeout: 10\n" + fleet.install_config(parallel=min(N, 64),
                                                                         prebuilt_venv=a.venv == "prebuilt"))
        run(cfg, "b01", {})                              # warm-up: builds (or finds) the cached wheelhouse
        fresh: dict[int, list[float]] = {1: [], N: []}
        rerun: dict[int, list[float]] = {1: [], N: []}
        cpu = {k: {"client": [], "nodes": [], "relay": []} for k in ("fresh1", f"fresh{N}", "rerun1", f"rerun{N}")}

        def timed(kind, n, nodes):
            c = {}
            s0, r0 = sshd_cpu(fleet), relay_cpu(fleet)
            dt = run(cfg, nodes, c)
            cpu[f"{kind}{n}"]["client"].append(c["client"])
            cpu[f"{kind}{n}"]["nodes"].append(sshd_cpu(fleet) - s0)
            cpu[f"{kind}{n}"]["relay"].append(relay_cpu(fleet) - r0)
            (fresh if kind == "fresh" else rerun)[n].append(dt)

        seq = []
        for _ in range(a.rounds):
            for n, nodes in ((1, "b01"), (N, many_list)):
                shutil.rmtree(fleet.root, ignore_errors=True)
                fleet.root.mkdir()
                timed("fresh", n, nodes)
                timed("rerun", n, nodes)
            if not a.no_sequential:
                shutil.rmtree(fleet.root, ignore_errors=True)     # the same N one at a time: what fan-out buys
                fleet.root.mkdir()
                seq.append(run(cfg, many_list, {}, "--parallel", "1"))
    finally:
        fleet.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in (("fresh", fresh), ("rerun", rerun))}
    cmed = {k: {w: statistics.median(v) for w, v in d.items()} for k, d in cpu.items()}
    print(f"venv: {a.venv}, cpus: {os.cpu_count()}, load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"rounds: {a.rounds} (median)")
    print(f"{'wall time':44}{'1 node':>10}{f'{N} nodes':>10}{f'{N}/1':>8}")
    for k, label in (("fresh", "install (fresh nodes)"), ("rerun", "rerun (nothing to do)")):
        one, many = med[k][1], med[k][N]
        print(f"{label:44}{one:9.2f}s{many:9.2f}s{many / one:7.2f}x")
    if seq:
        print(f"{f'install, {N} nodes, --parallel 1':44}{'':10}{statistics.median(seq):9.2f}s"
              f"{statistics.median(seq) / med['fresh'][1]:7.2f}x  (one node at a time)")
    print(f"{'CPU seconds':44}{'1 node':>10}{f'{N} nodes':>10}{f'{N}/1':>8}")
    for k, label in (("fresh", "install"), ("rerun", "rerun")):
        for w, wl in (("client", "slurmkit (admin side)"), ("nodes", f"sshd + node side ({N} 'nodes')"),
                      ("relay", "delay line (stand-in for the wire)")):
            one, many = cmed[f"{k}1"][w], cmed[f"{k}{N}"][w]
            print(f"{label + ': ' + wl:44}{one:9.2f}s{many:9.2f}s{many / max(one, 0.01):7.2f}x")
    for k in ("fresh", "rerun"):
        per = {n: cmed[f"{k}{n}"]["nodes"] / n for n in (1, N)}
        print(f"{k}: CPU-s per node on the node side (sshd and all it ran): {per[1]:.3f} (1 node), "
              f"{per[N]:.3f} ({N} nodes)")
    for k in ("fresh", "rerun"):
        ratio = med[k][N] / med[k][1]
        print(f"ratio {N}/1 ({k}): {ratio:.2f}x (target <= 3x): {'met' if ratio <= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
