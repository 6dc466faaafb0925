#!/usr/bin/env python3
"""Capture real Slurm output from a running dev cluster into tests/fixtures/local/slurm-<version>/.

    python3 dev/cluster.py --dir /tmp/sk-c24 up --slurm 24.11 --port 7130 --hooks true
    python3 dev/capture_slurm.py --dir /tmp/sk-c24          # the version comes from the cluster's directory

A cluster not made by dev/cluster.py (a source build of a version Debian lacks) works too: its directory needs
env.sh (`export SLURM_CONF=...`) and cluster.json `{"slurm": "25.11", "bin": "<prefix>/bin", "built_from": "..."}`.

It walks the cluster through these states, one after another, and captures in each `sinfo --json`,
`squeue --json`, `scontrol --json -d show node` (23.02+), `scontrol -o -d show node`, `scontrol show node` and
`sinfo -R`:

    idle            every node resumed, no job
    drained         n4 drained by an admin ("admin: PSU swap ticket 4411")
    slurmkit-drain  n2 also drained with slurmkit's reason ("slurmkit:xid79 GPU 0000:3b:00 fell off the bus")
    gpu-job         a job holding 2 GPUs running on n1 (n1 MIXED)
    resumed         n2 resumed (24.11 keeps its old reason on the idle node, 26.05 clears it)

and writes a provenance row per file into tests/fixtures/FIXTURES-PROVENANCE.md (replacing older rows for the
same file). It changes the cluster it is pointed at (drains, resumes, submits, cancels): only a dev cluster.
Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
PROV = FIXTURES / "FIXTURES-PROVENANCE.md"
ADMIN_REASON = "admin: PSU swap ticket 4411"
SK_REASON = "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"
COMMANDS = [  # (file stem, argv, first version that has it)
    ("sinfo-json", ["sinfo", "--json"], (21, 8)),
    ("squeue-json", ["squeue", "--json"], (21, 8)),
    ("scontrol-json-d-show-node", ["scontrol", "--json", "-d", "show", "node"], (23, 2)),
    ("scontrol-o-d-show-node", ["scontrol", "-o", "-d", "show", "node"], (0, 0)),
    ("scontrol-show-node", ["scontrol", "show", "node"], (0, 0)),
    ("sinfo-R", ["sinfo", "-R"], (0, 0)),
]
STATES = {
    "idle": "every node idle, no job",
    "drained": f"n4 IDLE+DRAIN by `scontrol update` (\"{ADMIN_REASON}\")",
    "slurmkit-drain": f"n2 also IDLE+DRAIN with slurmkit's reason (\"{SK_REASON}\"), n4 as before",
    "gpu-job": "n2, n4 drained as before; a `sbatch -G 2 -w n1` job running (n1 MIXED, 2 GPUs in use)",
    "resumed": "n2 resumed by `scontrol update State=RESUME` (n4 drained, n1 job running)",
}


class Cluster:
    def __init__(self, directory: Path):
        self.dir = directory
        info = json.loads((directory / "cluster.json").read_text())
        self.slurm = info.get("slurm", "22.05")
        self.bin = info.get("bin")      # a source build's bin/ (no dev/cluster.py support): its clients directly
        self.built_from = info.get("built_from")
        self.env = dict(os.environ)
        for line in (directory / "env.sh").read_text().splitlines():
            if line.startswith("export ") and "=" in line:
                k, _, v = line[len("export "):].partition("=")
                self.env[k] = v

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        if self.bin:
            full = [os.path.join(self.bin, argv[0]), *argv[1:]]
        elif self.slurm == "22.05":
            full = argv
        else:
            full = [sys.executable, str(REPO / "dev" / "rootfs.py"), "run", "--slurm", self.slurm, "--", *argv]
        res = subprocess.run(full, env=self.env, capture_output=True, text=True, timeout=120)
        if check and res.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
        return res


def _release(c: Cluster) -> str:
    out = c.run(["sinfo", "--version"]).stdout.split()
    return out[-1] if out else c.slurm


def _wait(c: Cluster, what, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(1)
    sys.exit("the cluster did not reach the state in time")


def _node_state(c: Cluster, node: str) -> str:
    out = c.run(["scontrol", "-o", "show", "node", node]).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("State=")), "")


def _enter(c: Cluster, state: str) -> None:
    upd = ["scontrol", "update"]
    if state == "idle":
        c.run(["scancel", "--full", "-u", "root"], check=False)
        for n in ("n1", "n2", "n3", "n4"):
            if "DRAIN" in _node_state(c, n) or "DOWN" in _node_state(c, n):
                c.run(upd + [f"NodeName={n}", "State=RESUME"])
        _wait(c, lambda: all(_node_state(c, n) == "IDLE" for n in ("n1", "n2", "n3", "n4")))
    elif state == "drained":
        c.run(upd + ["NodeName=n4", "State=DRAIN", f"Reason={ADMIN_REASON}"])
    elif state == "slurmkit-drain":
        c.run(upd + ["NodeName=n2", "State=DRAIN", f"Reason={SK_REASON}"])
    elif state == "gpu-job":
        c.run(["sbatch", "-G", "2", "-w", "n1", "-J", "capture-gpu", "-o", "/dev/null", "--wrap", "sleep 600"])
        _wait(c, lambda: _node_state(c, "n1").startswith("MIXED"))
    elif state == "resumed":
        c.run(upd + ["NodeName=n2", "State=RESUME"])
        _wait(c, lambda: "DRAIN" not in _node_state(c, "n2"))


def _provenance(rows: dict[str, str]) -> None:
    text = PROV.read_text()
    lines = [ln for ln in text.splitlines() if not any(ln.startswith(f"| {name} |") for name in rows)]
    PROV.write_text("\n".join(lines + list(rows.values())) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, type=Path, help="the running dev cluster's directory")
    ap.add_argument("--states", default=",".join(STATES), help="comma-separated subset of: " + ",".join(STATES))
    args = ap.parse_args()
    c = Cluster(args.dir)
    release = _release(c)
    mm = tuple(int(x) for x in release.split(".")[:2])
    where = c.built_from or ("Debian 12 host packages" if c.slurm == "22.05" else
                             {"24.11": "Debian 13 trixie root fs", "26.05": "Debian sid root fs"}.get(c.slurm, "root fs"))
    out_dir = FIXTURES / "local" / f"slurm-{c.slurm}"
    out_dir.mkdir(parents=True, exist_ok=True)
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    rows = {}
    for state in args.states.split(","):
        _enter(c, state)
        time.sleep(1)
        for stem, argv, since in COMMANDS:
            if mm < since:
                continue
            res = c.run(argv)
            path = out_dir / f"{stem}-{state}.txt"
            path.write_text(res.stdout)
            rel = str(path.relative_to(FIXTURES))
            how = "a 4-node cluster of that build (own slurm.conf)" if c.bin else \
                f"`dev/cluster.py up --slurm {c.slurm}`"
            rows[rel] = (f"| {rel} | captured from Slurm {release} on the dev cluster ({how}), {today}, `{' '.join(argv)}` by dev/capture_slurm.py | 4 slurmd nodes "
                         f"n1..n4 on one host, Slurm {release} ({where}), gres gpu:8 each | {state}: "
                         f"{STATES[state]} | stdout as printed, unedited |")
            print(f"{rel}: {len(res.stdout)} bytes")
    c.run(["scancel", "--full", "-n", "capture-gpu"], check=False)
    _provenance(rows)


if __name__ == "__main__":
    main()
