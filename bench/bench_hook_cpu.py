#!/usr/bin/env python3
"""What one job's prolog and epilog cost a node in CPU instructions, this tree against a base revision, in one run:

    .venv/bin/python bench/bench_hook_cpu.py [--base 5e166d0] [--rounds 2]

Instructions, not seconds: callgrind (valgrind) counts the instructions each hook's own Python process executes,
which does not change with the load on a shared 2-core machine the way CPU seconds do. Each hook runs as Slurm
runs it (the `python -I -S` boot of prolog/prolog and epilog/epilog, a warm settings cache, the fake GPU tools of
the healthy-h100x8 scenario, a job on GPU 0); the tools it starts are not counted (their cost is the tools', the
same for both trees). The base revision is exported with `git archive`. `python -I -S -c pass` is the floor.
The efficiency sampler is counted for a life of its start grace (2 s: no job step appears), the base's as the
interpreter its prolog started, this tree's as the part its forked child counted past the fork.
Target (issue 18): the hooks' instructions per job (prolog + epilog + sampler) halved against the tree the issue
was measured on (5e166d0, before its hook work). Both trees run with this tree's `-I -S` boot, so the base's
`site` cost (its scripts ran `python -I`) is left out of its figure: the ratio is a conservative one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prolog import FAKE, PY, REPO, SCEN, site_config  # noqa: E402 - the same healthy node

BOOT = (  # prolog/prolog's boot: the tree first, then the venv's site-packages, no `site`
    "import sys\nm, root = sys.argv.pop(1), sys.argv.pop(1)\n"
    "sys.path.append(root)\nsys.path.append(sys.executable.rpartition('/')[0] + '/../lib/python%d.%d/site-packages'"
    " % sys.version_info[:2])\nimport runpy\nrunpy.run_module(m, run_name='__main__', alter_sys=True)"
)


def counts(argv: list[str], env: dict) -> list[int]:
    # run from a scratch directory: the forked sampler rewrites its command line (proc.set_title), which under
    # valgrind is valgrind's own memory, and its count may then land in a file named after a piece of it
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600,
                       cwd=env.get("SK_BENCH_CWD") or tempfile.gettempdir())
    n = [int(ln.split()[-1]) for ln in r.stderr.splitlines() if "Collected :" in ln]
    if not n:
        raise SystemExit(f"no instruction count for {argv[-2:]}: {r.stderr[-400:]}")
    return n  # in the order they exit: the hook, then a sampler it forked (which counts from the fork on top)


def instructions(argv: list[str], env: dict) -> int:
    return counts(argv, env)[0]


FORK = """import os, sys
root = sys.argv.pop(1)
sys.path.append(root)
sys.path.append(sys.executable.rpartition("/")[0] + "/../lib/python%d.%d/site-packages" % sys.version_info[:2])
from slurmkit.nodesettings import load
from slurmkit.efficiency.hooks import start
start(load(), os.environ)
sys.stdout.flush()
os._exit(0)
"""


def config(d: Path) -> Path:
    # bench_prolog's healthy node, with the dev cluster's sync and a short sampler grace
    return site_config(d, "health/", f"""sync:
  enabled: true
  source: {d}/local/$SLURM_JOB_USER/$SLURM_JOB_ID/ckpt
  dest: {d}/shared/$SLURM_JOB_USER
efficiency:
  start_grace: 2
""")


def measure(tree: Path, d: Path, rounds: int) -> dict:
    cfg = config(d)
    env = {"SLURMKIT_CONFIG": str(cfg), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN), "SLURMD_NODENAME": "n1",
           "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0",
           "SLURMKIT_HOOK_CACHE_DIR": str(d / "cache"), "SK_BENCH_CWD": str(d)}
    out: dict = {"prolog": [], "epilog": [], "sampler": []}
    for i in range(rounds + 1):  # the first round compiles the .pyc files and fills the settings cache
        e = dict(env, SLURM_JOB_ID=str(100 + i))
        for hook in ("prolog", "epilog"):
            n = counts([str(PY), "-I", "-S", "-c", BOOT, f"slurmkit.hooks.{hook}", str(tree)], e)
            if i:
                out[hook].append(n[0])
    if "fork_detached" in (tree / "slurmkit" / "efficiency" / "hooks.py").read_text():  # forked: its child alone
        for i in range(rounds):
            # the prolog's own start of it, from a process that exits at once after the fork: the child's count
            # (which starts at the parent's) less the parent's is what the sampler itself costs
            n = counts([str(PY), "-I", "-S", "-c", FORK, str(tree)], dict(env, SLURM_JOB_ID=str(200 + i)))
            out["sampler"].append(n[1] - n[0])
    else:  # an interpreter the prolog started: the same sampler, started as that prolog did
        flags = ["--job", "999", "--gpus", "0", "--out", str(d / "s.out"), "--interval", "0.5", "--tool",
                 str(FAKE / "nvidia-smi"), "--watchdog", "0.5", "--start-grace", "2"]
        for _ in range(rounds):
            out["sampler"].append(instructions(
                [str(PY), "-I", "-S", "-c", BOOT, "slurmkit.efficiency.sampler", str(tree), *flags], env))
    return {k: min(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="5e166d0")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("bench_hook_cpu needs valgrind (apt-get install valgrind): not skipped, not run")
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-hookcpu-"))
    base = tmp / "base"
    base.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", a.base, "slurmkit"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(base)], input=arch.stdout, check=True)
    floor = instructions([str(PY), "-I", "-S", "-c", "pass"], dict(os.environ))
    res = {}
    for name, tree in (("base", base), ("this tree", REPO)):
        d = tmp / ("run-" + name.replace(" ", "-"))
        d.mkdir()
        res[name] = measure(tree, d, a.rounds)
    subprocess.run(["pkill", "-f", str(tmp)], check=False)  # samplers of the runs, if any outlived their grace
    print(f"instructions per hook run (callgrind, the hook's own process; python -I -S -c pass: {floor / 1e6:.1f} M)")
    print(f"{'':10s} {'base ' + a.base:>16s} {'this tree':>12s} {'ratio':>7s}")
    tot = {k: 0 for k in res}
    for hook in ("prolog", "epilog", "sampler"):
        b, t = res["base"][hook], res["this tree"][hook]
        tot["base"] += b
        tot["this tree"] += t
        print(f"{hook:10s} {b / 1e6:14.1f} M {t / 1e6:10.1f} M {t / b:7.2f}")
    r = tot["this tree"] / tot["base"]
    print(f"{'per job':10s} {tot['base'] / 1e6:14.1f} M {tot['this tree'] / 1e6:10.1f} M {r:7.2f}"
          f"   (target <= 0.50: {'met' if r <= 0.5 else 'MISSED'})")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
