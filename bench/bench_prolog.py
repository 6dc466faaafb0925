#!/usr/bin/env python3
"""Benchmark the slurmkit prolog (issue 3). One command, ratios measured side by side in the same run:

    .venv/bin/python bench/bench_prolog.py [--runs 30] [--jobs 40] [--dir /tmp/sk-bench] [--port 7167] [--skip-cluster]

(a) The prolog's wall time on a healthy node (fake GPU tools) beside its floor: the same captures (`nvidia-smi -q`,
    `dmesg`, the tools the prolog profile runs) run back to back from a shell, and `python -c pass`; the prolog in
    its own process and through a hook agent of its own, and the CPU of a job's prolog + epilog both ways (the hook
    processes and their tools, and the agent's children), for this tree and for the tree before issue 27 (--base,
    exported with git archive). Runs are interleaved so machine noise hits all alike. Targets (issue 27): in
    process at most 3 interpreter start-ups; through the agent no slower than before.
(b) N short jobs on the dev cluster with the slurmkit prolog+epilog vs `/bin/true`-like hooks
    (`dev/cluster.py up --hooks true`), one cluster after the other on the same dir/port: also hooks that only
    start Python and exit (`--hooks python`: what any hook written in Python costs at least), and the slurmkit
    hooks twice: in their own processes, and handed to the hook agent (`up --agent`, slurmkit/agent/server.py,
    what `slurmkit install` sets up). Each cluster runs two arrays: cold (the first, on the cluster just started,
    as issue 18 measured: it carries the new cluster's first scheduling, the same for every hook) and steady (the
    next). Throughput ratio against /bin/true (target >= 0.6, issue 18, on the agent's figure). The efficiency
    sampler runs at the shipped 10 s (`--efficiency-interval`). The jobs are root's (the benchmark submits as
    root): the epilog's checkpoint sync has nothing to do for them, as for any job that writes no checkpoints.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "dev"))
from fakesite import write_site_config as site_config  # noqa: E402 - a healthy fake node (dev/fakesite.py)

PY = REPO / ".venv" / "bin" / "python"
FAKE = REPO / "dev" / "fakegpu" / "bin"
SCEN = REPO / "dev" / "fakegpu" / "scenarios" / "healthy-h100x8"


def timed(argv, env) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.strip()}")
    return dt


def _cpu_ticks(pid: int) -> int:
    """CPU (clock ticks) of an agent and everything under it: its own and its reaped children's (utime, stime,
    cutime, cstime), and its live children's the same way (a child that served a hook may wait for the next one:
    its CPU is not in the agent's cutime until it exits)."""
    def four(p) -> tuple[int, int]:
        f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[1]), sum(int(x) for x in f[11:15])   # ppid, utime+stime+cutime+cstime
    total = four(pid)[1]
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != pid:
            try:
                ppid, t = four(p.name)
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                total += t
    return total


def _children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


BASE = "ef2521e"  # the tree before issue 27: its prolog is "today's figure" beside this tree's, in the same run


def export(rev: str, into: Path) -> Path:
    """slurmkit/, prolog/ and epilog/ of `rev` (git archive): its hook scripts find that slurmkit beside them;
    bin/ too where `rev` has it (prolog/prolog and epilog/epilog are links to bin/slurmkit-hook there)."""
    into.mkdir(parents=True)
    paths = ["slurmkit", "prolog", "epilog"]
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{rev}:bin"], capture_output=True).returncode == 0:
        paths.append("bin")
    arch = subprocess.run(["git", "-C", str(REPO), "archive", rev, *paths], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=arch, check=True)
    return into


def _agent(tree: Path, tmp: Path, cfg: Path, tag: str):
    """A hook agent of `tree`'s own slurmkit, on a socket of its own; returns (process, socket)."""
    sock, pidf = tmp / f"agent-{tag}" / "agent.sock", tmp / f"agent-{tag}.pid"
    run = "import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('slurmkit.agent.server', run_name='__main__')"
    p = subprocess.Popen([str(PY), "-I", "-c", run, str(tree), "--socket", str(sock), "--pid-file", str(pidf)],
                         env=dict(os.environ, SLURMKIT_CONFIG=str(cfg), SLURMKIT_HOOK_CACHE_DIR=str(tmp / f"cache-{tag}")),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not pidf.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return p, sock


def part_a(runs: int, base: str = BASE) -> dict:
    """This tree's prolog (and `base`'s, where given) in its own process and through its own agent, interleaved
    with the floor and `python -I -c pass`; ms medians keyed "<tree> <way>"."""
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-prolog-"))
    cfg = site_config(tmp)
    # what `slurmkit install` leaves beside every node's config (the tree before ignores it: its own cache)
    from slurmkit import nodesettings
    Path(nodesettings.settings_path(str(cfg))).write_bytes(nodesettings.render(cfg.read_bytes(), str(cfg)))
    trees = {"this": REPO}
    if base:
        trees["before"] = export(base, tmp / "before")
    # what slurmd gives a prolog: no PATH, Slurm's variables (plus what the dev cluster's wrapper exports); the
    # interpreter is the venv's, the slurmkit the one beside each tree's hook script
    env0 = {"SLURMKIT_CONFIG": str(cfg), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN), "SLURMD_NODENAME": "n1",
            "SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1",
            "CUDA_VISIBLE_DEVICES": "0,1", "SLURMKIT_AGENT_SOCKET": "none", "SLURM_JOB_EXIT_CODE": "0",
            "SLURMKIT_PYTHON": str(PY)}
    agents = {}
    try:
        ways = {}
        for tag, tree in trees.items():
            env = dict(env0, SLURMKIT_HOOK_CACHE_DIR=str(tmp / f"cache-{tag}"))   # warmed by the first run
            agents[tag], sock = _agent(tree, tmp, cfg, tag)
            hooks = ([str(tree / "prolog" / "prolog")], [str(tree / "epilog" / "epilog")])
            ways[f"{tag} in process"] = (hooks, env, None)
            ways[f"{tag} agent"] = (hooks, dict(env, SLURMKIT_AGENT_SOCKET=str(sock)), agents[tag])
        # the floor: the very tool calls the prolog profile makes (one nvidia-smi -q shared by the GPU checks, dmesg)
        floor = ["/bin/sh", "-c", f"{FAKE}/nvidia-smi -q >/dev/null && {FAKE}/dmesg >/dev/null"]
        bare = [str(PY), "-I", "-c", "pass"]
        for (prolog, _), env, _ in ways.values():   # warm the page cache and each settings cache
            timed(prolog, env)
        t: dict[str, list[float]] = {k: [] for k in (*ways, "floor", "bare")}
        cpu = {k: 0.0 for k in ways}
        tick = os.sysconf("SC_CLK_TCK")
        for i in range(runs):
            for name, ((prolog, epilog), env, agent) in ways.items():
                c0, a0 = _children_cpu(), _cpu_ticks(agent.pid) if agent else 0
                t[name].append(timed(prolog, dict(env, SLURM_JOB_ID=str(100 + i))))
                timed(epilog, dict(env, SLURM_JOB_ID=str(100 + i)))
                cpu[name] += _children_cpu() - c0 + ((_cpu_ticks(agent.pid) - a0) / tick if agent else 0)
            t["floor"].append(timed(floor, env0))
            t["bare"].append(timed(bare, env0))
    finally:
        for p in agents.values():
            p.terminate()
            p.wait(timeout=30)
        stop_samplers(tmp / "state" / "efficiency")
    med = {k: statistics.median(v) * 1000 for k, v in t.items()}
    med.update({f"cpu {k}": v / runs * 1000 for k, v in cpu.items()})
    return med


def stop_samplers(d: Path) -> None:
    """Part (a) runs the prolog alone: the efficiency samplers it starts (one a run) have no epilog to stop them.
    Stop every sampler writing under d, so they do not load the machine during part (b)."""
    import signal
    mark = str(d).encode()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
            if b"slurmkit.efficiency.sampler" in argv and any(a.startswith(mark) for a in argv):
                os.killpg(int(p.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def cluster(args, *cmd, check=True):
    return subprocess.run([str(PY), str(REPO / "dev" / "cluster.py"), "--dir", args.dir, *cmd], check=check,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)


def run_array(args, env: dict, hooks: str) -> float:
    """Submit args.jobs one-GPU jobs (an array) and wait until none is left: seconds from submit to all done."""
    t0 = time.perf_counter()
    r = subprocess.run(["sbatch", "--parsable", f"--array=1-{args.jobs}", "--gres=gpu:1", "-o", "/dev/null",
                        "--wrap", "true"], env=env, capture_output=True, text=True, check=True, timeout=30)
    jid = r.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%i"], env=env, capture_output=True, text=True,
                           timeout=30)
        if q.returncode == 0 and not q.stdout.strip():
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"{args.jobs} jobs not done after 600 s ({hooks} hooks)")
    return time.perf_counter() - t0


def jobs_throughput(args, hooks: str, agent: bool = False) -> tuple[float, float]:
    """(cold, steady): the first array on a cluster just started (what issue 18 measured: it includes the new
    cluster's first scheduling, ~2 s here, the same for every kind of hook), then a second array on the same
    cluster, now settled. The steady figure is the hooks' own cost."""
    cluster(args, "down", check=False)
    cluster(args, "up", "--port", str(args.port), "--hooks", hooks, "--efficiency-interval",
            str(args.efficiency_interval), *(["--agent"] if agent else []))
    env = dict(os.environ, SLURM_CONF=f"{args.dir}/slurm.conf")
    try:
        cold = run_array(args, env, hooks)
        steady = run_array(args, env, hooks)
        drained = subprocess.run(["sinfo", "-h", "-R", "-o", "%N %E"], env=env, capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        if drained:
            raise SystemExit(f"nodes drained during the benchmark ({hooks} hooks): {drained}")
        return cold, steady
    finally:
        cluster(args, "down", check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--dir", default="/tmp/sk-bench")
    ap.add_argument("--port", type=int, default=7167)
    ap.add_argument("--skip-cluster", action="store_true", help="only part (a)")
    ap.add_argument("--base", default=BASE, help="the revision part (a) measures beside this tree ('' for none)")
    ap.add_argument("--efficiency-interval", type=float, default=10.0,
                    help="the sampler's interval in part (b): 10 s is the shipped default (tests use 0.5)")
    args = ap.parse_args()

    a = part_a(args.runs, args.base)
    what = "the tree before issue 27" if args.base == BASE else "the revision given with --base"
    print(f"(a) prolog on a healthy node, ms medians of {args.runs} interleaved runs (fake GPU tools); 'before' is"
          f" {what} ({args.base}), measured in this same run:")
    print(f"    floor (same tools from sh) {a['floor']:7.1f}    python -I -c pass {a['bare']:7.1f}")
    for way in ("in process", "agent"):
        for tag in ("this", "before"):
            k = f"{tag} {way}"
            if k in a:
                print(f"    {k:18s} prolog {a[k]:7.1f}  (- floor {a[k] - a['floor']:6.1f}; "
                      f"{a[k] / a['bare']:.2f} start-ups)  CPU of prolog + epilog {a['cpu ' + k]:7.1f}")
    n = a["this in process"] / a["bare"]
    print(f"    in process: {n:.2f} interpreter start-ups (target <= 3: {'met' if n <= 3 else 'MISSED'})")
    if "before agent" in a and a["before agent"] >= 0.8 * a["before in process"]:
        # the base's hook ran in its own process: an older tree's hook script does not speak this tree's agent
        print(f"    through the agent: not compared ({args.base}'s prolog did not go through its agent: "
              f"{a['before agent']:.1f} ms, as in process)")
    elif "before agent" in a:
        r = a["this agent"] / a["before agent"]
        print(f"    through the agent: this / before {r:.2f} (target: no slower, <= 1.05 for noise:"
              f" {'met' if r <= 1.05 else 'MISSED'})")
    if args.skip_cluster:
        return
    runs = {"true": jobs_throughput(args, "true"), "python": jobs_throughput(args, "python"),
            "in process": jobs_throughput(args, "slurmkit"), "agent": jobs_throughput(args, "slurmkit", agent=True)}
    print(f"(b) {args.jobs} one-GPU jobs (an array) on the 4-node dev cluster, submit -> all done; the efficiency"
          f" sampler every {args.efficiency_interval:g} s. cold: the first array on a cluster just started (as"
          f" issue 18 measured); steady: the next array on the same cluster:")
    names = {"true": "/bin/true hooks", "python": "bare `python -I -S -c pass` hooks (a Python hook's floor)",
             "in process": "slurmkit hooks, in their own processes", "agent": "slurmkit hooks through the hook agent"}
    for k, (cold, steady) in runs.items():
        print(f"    {names[k]:58s} cold {cold:6.2f} s  steady {steady:6.2f} s ({args.jobs / steady:5.2f} jobs/s)")
    for i, phase in enumerate(("cold", "steady")):
        t = runs["true"][i]
        r = {k: t / v[i] for k, v in runs.items()}
        # the target is judged on the steady figure: the cold one moves with the new cluster's first scheduling
        verdict = f"target >= 0.6: {'met' if r['agent'] >= 0.6 else 'MISSED'}" if phase == "steady" else \
            "not judged: it carries the new cluster's start"
        print(f"    {phase:6s} throughput ratio against /bin/true: Python floor {r['python']:.2f}, in process"
              f" {r['in process']:.2f}, agent {r['agent']:.2f}   ({verdict})")


if __name__ == "__main__":
    main()
