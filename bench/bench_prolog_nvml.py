#!/usr/bin/env python3
"""The prolog's GPU checks through NVML against the same prolog through nvidia-smi (issue 32), on NVIDIA's mock NVML
(../shared/tools/nvml-mock) with NVIDIA's real nvidia-smi 535 over the same library, same node state, same run:

    .venv/bin/python bench/bench_prolog_nvml.py [--runs 20]

(a) the prolog as Slurm runs it (prolog/prolog in its own process, no PATH, `health.gpu_source: nvml` vs
    `nvidia-smi`), interleaved run by run so machine noise hits both alike; medians and their ratio;
(b) the same prolog handed to a hook agent of each config (slurmkit/agent/server.py: nvidia-ml-py imported once
    in the agent; each hook's child, a fork, runs nvmlInit itself: NVML's state does not survive a fork);
(c) the prolog profile's checks in one process (`run_checks(settings, "prolog")` N times each way: NVML initialised
    once, as in a long-lived process; nvidia-smi one process a run); medians and their ratio;
and the floor of the nvidia-smi way: `nvidia-smi -q` alone.

The 535 binary's full `-q` crashes over the mock, so its `-q` is its `-q -d` of the sections the checks read
(dev/fakegpu/bin/fake-tool does the same): it prints less than a real `-q` (no PCI, no Fabric), so the nvidia-smi
way is, if anything, flattered. The mock answers from memory: on a real node nvidia-smi and NVML both wait on the
driver, and the process nvidia-smi costs (its start, its own nvmlInit) is what NVML saves. The efficiency sampler
is off (it is not what is compared) and so is draining; `dmesg` replays the healthy-h100x8 capture.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "dev"))
import fakenvml  # noqa: E402

PY = REPO / ".venv" / "bin" / "python"
FAKE = REPO / "dev" / "fakegpu" / "bin"
SCEN = REPO / "dev" / "fakegpu" / "scenarios" / "healthy-h100x8"
SECTIONS = "MEMORY,ECC,PIDS,PERFORMANCE,ROW_REMAPPER,PAGE_RETIREMENT,RESET_STATUS,CLOCK"


def site(tmp: Path, source: str, smi: Path) -> Path:
    cfg = tmp / f"{source}.yaml"
    tool = f"  nvidia_smi: {smi}\n" if source == "nvidia-smi" else ""
    cfg.write_text(f"""tools:
{tool}  dmesg: {FAKE}/dmesg
paths:
  state_dir: {tmp}/state-{source}
  health_log: {tmp}/health-{source}.jsonl
gpu_count:
  expected: 8
driver:
  driver_versions: ["550.163.01"]
health:
  drain: false
  gpu_source: {source}
efficiency:
  enabled: false
""")
    return cfg


def timed(argv, env) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.strip()}")
    return dt


def agent(tmp: Path, cfg: Path, tag: str, env0: dict):
    """A hook agent (slurmkit/agent/server.py) with the mock's environment: it imports nvidia-ml-py once; each
    hook's child (a fork) initialises NVML itself. Returns (process, socket)."""
    sock, pidf = tmp / f"agent-{tag}" / "agent.sock", tmp / f"agent-{tag}.pid"
    env = dict(os.environ, SLURMKIT_CONFIG=str(cfg), SLURMKIT_HOOK_CACHE_DIR=str(tmp / f"cache-{tag}"),
               **{k: v for k, v in env0.items() if k.startswith(("LD_", "MOCK_"))})
    p = subprocess.Popen([str(PY), "-I", "-m", "slurmkit.agent.server", "--socket", str(sock), "--pid-file",
                          str(pidf)], env=env, cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not pidf.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return p, sock


def in_process(cfgs: dict[str, Path], runs: int) -> dict[str, float]:
    """Part (c), in this process (started with the mock's environment)."""
    from slurmkit import config
    from slurmkit.health.runner import run_checks

    settings = {k: config.load(str(p)) for k, p in cfgs.items()}
    for k, s in settings.items():  # warm: imports, NVML's first nvmlInit, the page cache
        rep = run_checks(s, "prolog", job_gpus=[0, 1], node="n1")
        assert rep.healthy and rep.gpu_source["source"] == k, (k, rep.to_dict())
    t: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(runs):
        for k, s in settings.items():
            t0 = time.perf_counter()
            run_checks(s, "prolog", job_gpus=[0, 1], node="n1")
            t[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1000 for k, v in t.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # part (c), re-executed with the mock
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        tmp = Path(a.tmp)
        med = in_process({"nvml": tmp / "nvml.yaml", "nvidia-smi": tmp / "nvidia-smi.yaml"}, a.runs)
        print(f"{med['nvml']:.2f} {med['nvidia-smi']:.2f}")
        return 0
    why = fakenvml.available()
    if why:
        raise SystemExit(f"bench_prolog_nvml: {why}")
    try:
        import pynvml  # noqa: F401
    except ImportError:
        raise SystemExit("bench_prolog_nvml: nvidia-ml-py is not installed (pip install -e '.[test]')") from None
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-nvml-"))
    smi = tmp / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nif [ "$*" = "-q" ]; then exec {fakenvml.CACHE}/nvidia-smi -q -d {SECTIONS}; fi\n'
                   f'exec {fakenvml.CACHE}/nvidia-smi "$@"\n')
    smi.chmod(0o755)
    cfgs = {k: site(tmp, k, smi) for k in ("nvml", "nvidia-smi")}
    mock = fakenvml.MOCK
    # what slurmd gives a prolog (no PATH), plus the mock's environment (a real node: the driver's library)
    env0 = {"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "1", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root",
            "SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1", "SLURMKIT_AGENT_SOCKET": "none",
            "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN), "SLURMKIT_PYTHON": str(PY),
            "LD_LIBRARY_PATH": str(mock / "lib"),
            "MOCK_NVML_CONFIG": str(mock / "configs" / "mock-nvml-config-h100.yaml"),
            "MOCK_NVML_OVERRIDES": str(tmp / "overrides.yaml")}
    prolog = [str(REPO / "prolog" / "prolog")]
    envs = {k: dict(env0, SLURMKIT_CONFIG=str(p), SLURMKIT_HOOK_CACHE_DIR=str(tmp / f"cache-{k}"))
            for k, p in cfgs.items()}
    agents = {}
    try:
        for k in list(envs):
            agents[k], sock = agent(tmp, cfgs[k], k, env0)
            envs[f"{k} agent"] = dict(envs[k], SLURMKIT_AGENT_SOCKET=str(sock))
        for env in envs.values():
            timed(prolog, env)
        t: dict[str, list[float]] = {**{k: [] for k in envs}, "floor": []}
        for i in range(a.runs):
            for k, env in envs.items():
                t[k].append(timed(prolog, dict(env, SLURM_JOB_ID=str(100 + i))))
            t["floor"].append(timed([str(smi), "-q"], env0))
    finally:
        for p in agents.values():
            p.terminate()
            p.wait(timeout=30)
    med = {k: statistics.median(v) * 1000 for k, v in t.items()}
    # each way read where it was told to, and passed (the health log says which source)
    import json
    for k in cfgs:
        recs = [json.loads(x) for x in (tmp / f"health-{k}.jsonl").read_text().splitlines()]
        src = {r["gpu_source"]["source"] for r in recs if "gpu_source" in r}
        assert src == {k} and all(r["status"] != "fail" for r in recs), (k, src)
    inner = subprocess.run([str(PY), __file__, "--inner", "--tmp", str(tmp), "--runs", str(a.runs)],
                           env=dict(os.environ, **{k: v for k, v in env0.items() if k.startswith(("LD_", "MOCK_"))},
                                    SLURMKIT_FAKEGPU_SCENARIO=str(SCEN)),
                           capture_output=True, text=True, timeout=600)
    if inner.returncode != 0:
        raise SystemExit(f"in-process part failed: {inner.stderr.strip()[-2000:]}")
    nv, sm = (float(x) for x in inner.stdout.split())
    print(f"bench_prolog_nvml: {a.runs} runs each, interleaved, medians (ms)")
    print(f"  (a) prolog/prolog process   NVML {med['nvml']:8.1f}   nvidia-smi {med['nvidia-smi']:8.1f}   "
          f"ratio nvidia-smi/NVML {med['nvidia-smi'] / med['nvml']:.2f}x")
    print(f"  (b) through the hook agent  NVML {med['nvml agent']:8.1f}   nvidia-smi {med['nvidia-smi agent']:8.1f}   "
          f"ratio nvidia-smi/NVML {med['nvidia-smi agent'] / med['nvml agent']:.2f}x")
    print(f"  (c) prolog checks in process NVML {nv:8.1f}   nvidia-smi {sm:8.1f}   ratio nvidia-smi/NVML {sm / nv:.2f}x")
    print(f"  floor: nvidia-smi -q alone {med['floor']:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
