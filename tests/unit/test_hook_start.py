"""What a job's hooks cost the node, as a user (an admin) sees it: the prolog and epilog Slurm runs (the repo's own
prolog/prolog and epilog/epilog scripts, with their `python -I -S` boot) import none of the heavy modules they
used to pay for on every job, and the efficiency sampler they start outlives them, detached.

The modules a hook imported are read from `-X importtime` through SLURMKIT_PYTHON (the scripts' documented
interpreter override), so the test sees the very process Slurm would run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hooksite import sampler_argv, write_site_config

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "dev" / "fakegpu" / "bin"
SCEN = REPO / "dev" / "fakegpu" / "scenarios" / "healthy-h100x8"

# modules a healthy job's hooks must not import: each costs more CPU than a check, on every node, every job
HEAVY = ("argparse", "yaml", "click", "jinja2", "paramiko", "ClusterShell", "hashlib",
         "ahocorasick_rs", "slurmkit.config", "slurmkit.checkpoint.sync")


def _env(tmp_path: Path, job: int) -> dict:
    cfg = tmp_path / "slurmkit.yaml"
    if not cfg.exists():
        write_site_config(tmp_path, sync=True)
        shim = tmp_path / "python-importtime"
        shim.write_text(f"#!/bin/sh\nexec {sys.executable} -X importtime \"$@\"\n")
        shim.chmod(0o755)
    return {"SLURMKIT_CONFIG": str(cfg), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN), "SLURMD_NODENAME": "n1",
            "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_USER": "root",
            "SLURM_JOB_GPUS": "0,1", "SLURMKIT_HOOK_CACHE_DIR": str(tmp_path / "cache"),
            "SLURMKIT_PYTHON": str(tmp_path / "python-importtime")}


DOCUMENTED_DATACLASS = """
import dataclasses


@dataclasses.dataclass
class D:
    \"\"\"doc\"\"\"

    x: int = 0
"""


def _stdlib_imports(*mods: str, define: bool = True) -> set[str]:
    """Modules the standard library itself imports with these and one documented dataclass: those are not the
    hooks' to avoid (dataclasses imports inspect, and with it ast, on every Python)."""
    code = (f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
            f"import {', '.join(mods)}\n{DOCUMENTED_DATACLASS if define else ''}\nprint(*sys.modules)")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def heavy() -> set[str]:
    return set(HEAVY) - _stdlib_imports("dataclasses", "re", "json", "subprocess", "typing")


def _hook(which: str, env: dict) -> tuple[subprocess.CompletedProcess, set[str]]:
    r = subprocess.run([str(REPO / which / which)], env=env, capture_output=True, text=True, timeout=120)
    mods = {ln.rsplit("|", 1)[1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    return r, mods


def test_hooks_import_nothing_heavy_and_start_the_sampler_detached(tmp_path):
    env = _env(tmp_path, 4242)
    _hook("prolog", dict(env, SLURM_JOB_ID="4241"))  # the first run parses the YAML and fills the settings cache
    _hook("epilog", dict(env, SLURM_JOB_ID="4241"))
    r, mods = _hook("prolog", env)
    assert r.returncode == 0, r.stderr
    assert mods and not mods & heavy(), sorted(mods & heavy())
    pidfile = tmp_path / "state" / "efficiency" / "4242.n1.pid"
    pid, started = (int(w) for w in pidfile.read_text().split())  # "PID START": the sampler's identity
    # the sampler runs in its own session and reads as the sampler in ps; the prolog has exited, the sampler
    # outlives it
    argv = sampler_argv(pid)
    assert b"slurmkit.efficiency.sampler" in argv and b"4242" in argv, argv
    assert os.getsid(pid) == pid
    # stdin/stdout/stderr are /dev/null: nothing of Slurm's prolog pipes is held open by the job-long sampler
    assert all(os.readlink(f"/proc/{pid}/fd/{fd}") == os.devnull for fd in ("0", "1", "2"))
    samples = tmp_path / "state" / "efficiency" / "4242.n1.samples"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and b"\n[" not in samples.read_bytes():
        time.sleep(0.2)  # the sampler's first sample (the fake nvidia-smi's series)
    assert b"\n[" in samples.read_bytes()
    r, mods = _hook("epilog", env)
    assert r.returncode == 0, r.stderr
    assert not mods & heavy(), sorted(mods & heavy())
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    # the job's efficiency record (beside the per-node health log) says what its sampler cost the node
    recs = [json.loads(ln) for ln in (tmp_path / "efficiency" / "n1.jsonl").read_text().splitlines()]
    (rec,) = [x for x in recs if x.get("job_id") == 4242]
    assert 0 <= rec["sampler_cpu_seconds"] < 5, rec
    assert started > 0
