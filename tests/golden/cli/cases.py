"""The command lines whose output and exit code are pinned (issue 27: every --json output and exit code unchanged
by the redesign). Each case runs on captured input only (no cluster, no node state): the site config names paths
that do not exist, and SLURMKIT_NODE fixes the node name.

    python3 tests/golden/cli/cases.py --base ef2521e     # (re)write the golden files from that revision's tree

The golden files were written from the tree before issue 27 (ef2521e), and every commit of the redesign answered
exactly as that tree did. Issue 35 then changed audit's answers on purpose (a `reason_history` field; a node down
with no reason is "not-responding", by slurm): those three files were rewritten from its merge, the diff in the
commit that did it. Issue 32's `clocks` check joined the list `check --only` names: check-unknown.json was rewritten
from that commit (the one line that says which checks exist), and again when the `fabric`, `ib`, `temperature`, `vbios`, `gpu_config`, `dstate` and `straggler` checks joined it. Issue 34's stragglers added four fields to each
GPU's summary (util_median, power_median_w, sm_clock_median_mhz, clock_reasons): efficiency-csv.json and
efficiency-dmon.json were rewritten from that commit, every other field as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
FIX = "tests/fixtures"
SITE = "tests/golden/cli/site.yaml"
# the console script of the tree at argv[1]: its lean entry where it has one (the tree before issue 27), else click
RUN = ("import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'slurmkit'\n"
       "try:\n    from slurmkit.entry import main\nexcept ImportError:\n    from slurmkit.cli import main\nmain()\n")

CASES: dict[str, list[str]] = {
    "check-xid79": ["check", "--json", "--capture", f"xid={FIX}/xid/akash-provider-xid79-dmesg-T-multiline-aligned.txt"],
    "check-xid-app": ["check", "--json", "--capture",
                      f"xid={FIX}/xid/gpu-01-xid13-13-43-journalctl-k-no-timestamp-truncated-comm.txt"],
    "check-ecc-remap": ["check", "--json", "--capture", f"ecc={FIX}/ecc/ml-eng-a100-sxm4-80gb-q-xid63-remap-pending.txt"],
    "check-healthy-q": ["check", "--json", "--capture",
                        f"ecc={FIX}/ecc/princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt"],
    "check-text": ["check", "--capture", f"xid={FIX}/xid/akash-provider-xid79-dmesg-T-multiline-aligned.txt"],
    "check-unknown": ["check", "--json", "--only", "nosuch", "--capture", f"xid={FIX}/xid/gpud-dmesg-ctime-xid13-xid109-peermem.txt"],
    "audit-scontrol": ["audit", "--json", "--now", "2026-12-01T00:00:00", "--from-file",
                       f"{FIX}/slurm/huji-cs-scontrol-show-node-gpu-mixed-drain-trailing-spaces.txt"],
    "audit-sinfo-R": ["audit", "--json", "--now", "2026-12-01T00:00:00", "--from-file",
                      f"{FIX}/slurm/gengwg-sinfo-R-kill-task-failed.txt"],
    "audit-csv": ["audit", "--csv", "--now", "2026-12-01T00:00:00", "--from-file",
                  f"{FIX}/slurm/bih-med0304-4xtesla-mixed-drain-psu-reason-slurm20.02-trailing-spaces.txt"],
    "audit-text": ["audit", "--now", "2026-12-01T00:00:00", "--from-file",
                   f"{FIX}/slurm/arjuna-sinfo-drng-at-fail-star-maint-mix-69.txt"],
    "audit-bad-now": ["audit", "--json", "--now", "yesterday", "--from-file", f"{FIX}/slurm/gengwg-sinfo-node-drng.txt"],
    "topo": ["topo", "--json", "--topo-file", f"{FIX}/topo/a100-4gpu-hgx-nv4-princeton-della-cryoem-mlx5.txt"],
    "topo-gres": ["topo", "--gres-conf", "--node-name", "gpu01", "--topo-file",
                  f"{FIX}/topo/dgx-a100-gengwg-mlx5-columns-numa-affinity.txt"],
    "efficiency-csv": ["efficiency", "--json", "--from-file",
                       f"{FIX}/gpuutil/rtx3090-idle-plus-rtxa6000-100pct-298w-query-gpu-index-name-mem-util-power.txt"],
    "efficiency-dmon": ["efficiency", "--json", "--from-file",
                        f"{FIX}/gpuutil/k40m-x2-dmon-one-idle-one-97pct-microway-zh.txt", "--interval", "1"],
    "render-missing": ["render", "tests/golden/cli/no-such-spec.yaml"],
    "unknown-command": ["nosuchcommand"],
}


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "XDG_"))}
    e.update(SLURMKIT_NODE="gpu-golden", SLURMKIT_CONFIG=str(REPO / SITE), SLURMKIT_NO_CACHE="1",
             COLUMNS="100", LC_ALL="C.UTF-8", TZ="UTC")
    return e


def run(tree: Path, argv: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-I", "-c", RUN, str(tree), *argv], capture_output=True, text=True,
                       cwd=REPO, env=env(), timeout=120)
    return {"argv": argv, "exit": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the revision whose answers are the golden ones")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        arch = subprocess.run(["git", "-C", str(REPO), "archive", a.base, "slurmkit", "templates"],
                              check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=arch, check=True)
        for name, argv in CASES.items():
            (HERE / f"{name}.json").write_text(json.dumps(run(Path(d), argv), indent=1) + "\n")
            print(name)


if __name__ == "__main__":
    main()
