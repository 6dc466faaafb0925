"""What a job's hooks cost the node, as a user (an admin) sees it: the prolog and epilog Slurm runs (the repo's own
prolog/prolog and epilog/epilog scripts, with their `python -I -S` boot) import only the modules on an allowlist
(every new one is a choice: it costs every node CPU on every job), and the efficiency sampler they start outlives them, detached.

The modules a hook imported are read from `-X importtime` through SLURMKIT_PYTHON (the scripts' documented
interpreter override), so the test sees the very process Slurm would run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hooksite import sampler_argv, write_site_config

REPO = Path(__file__).resolve().parents[3]
FAKE = REPO / "dev" / "fakegpu" / "bin"
SCEN = REPO / "dev" / "fakegpu" / "scenarios" / "healthy-h100x8"

# What a healthy job's hooks may import, by name: slurmkit's own modules on the hook path, and the standard
# library's (any other module, a new slurmkit one included, fails the test until it is added here on purpose: each
# costs every node CPU on every job). No third-party module at all (PyYAML only when install's settings file is stale or missing).
SLURMKIT_ALLOWED = {
    "slurmkit", "slurmkit.bounded", "slurmkit.drain", "slurmkit.errors", "slurmkit.files", "slurmkit.proc", "slurmkit.record",
    "slurmkit.signals", "slurmkit.times", "slurmkit.healthlog", "slurmkit.agent", "slurmkit.agent.client", "slurmkit.nodeconf", "slurmkit.hooks",
    "slurmkit.hooks.common", "slurmkit.hooks.prolog", "slurmkit.hooks.epilog",  # imported by bin/slurmkit-hook
    "slurmkit.nodesettings", "slurmkit.config", "slurmkit.typedyaml", "slurmkit.settings", "slurmkit.settings.checks", "slurmkit.settings.fields",
    "slurmkit.settings.ops", "slurmkit.settings.overrides", "slurmkit.health", "slurmkit.health.base",
    "slurmkit.health.checks",
    "slurmkit.health.checks.registry", "slurmkit.health.context",
    # the efficiency summary names clock event reasons from the clocks check's table (it imports nvsmi, base and
    # context only, all listed here)
    "slurmkit.health.checks.clocks", "slurmkit.health.dcgm", "slurmkit.health.heavycache",
    # the ib check's ibstat parser (re and records only), imported only where ibstat runs and prints; the
    # fabric captures' parser (slurmkit.fabric.ibnet) is never imported by a hook
    "slurmkit.health.ibstat",
    "slurmkit.health.kernlog", "slurmkit.health.kernlog.anchors", "slurmkit.health.kernlog.events",
    "slurmkit.health.kernlog.logline", "slurmkit.health.kernlog.signatures", "slurmkit.health.kernlog.sticky",
    # health.gpu_source (auto): the NVML edge and its pure -q renderer (standard library only); nvidia-ml-py itself
    # is imported only where libnvidia-ml.so.1 is found, i.e. on a node with NVIDIA's driver, in place of a process
    "slurmkit.health.nvml", "slurmkit.health.nvmlq",
    "slurmkit.health.nccl", "slurmkit.health.nvsmi", "slurmkit.health.runner", "slurmkit.efficiency",
    "slurmkit.efficiency.hooks", "slurmkit.efficiency.mfu", "slurmkit.efficiency.model",
    "slurmkit.efficiency.record", "slurmkit.efficiency.verdict", "slurmkit.efficiency.steps",
    # the straggler check's pure judgement (standard library and the clocks check's reason table)
    "slurmkit.efficiency.straggler",
    # the epilog's checkpoint sync: what it needs to find the job's checkpoints (the copy runs in a child)
    "slurmkit.checkpoint", "slurmkit.checkpoint.jobstate", "slurmkit.checkpoint.layout", "slurmkit.checkpoint.manifest",
    "slurmkit.checkpoint.patterns", "slurmkit.checkpoint.report",
}
# the check modules of the hooks' profiles: a check enters the prolog or epilog in the registry, on purpose, and the
# runner then imports its module (its own imports must still be on the list above)
from slurmkit.health.checks.registry import CHECKS  # noqa: E402

HOOK_CHECKS = {f"slurmkit.health.checks.{c.name}" for c in CHECKS if {"prolog", "epilog"} & set(c.profiles)}
# Not `dataclasses`: it imports `inspect` (and with it ast, dis, tokenize) and compiles three methods per class;
# slurmkit's records are slurmkit.record's (issue 27)
STDLIB_ALLOWED = {
    "__future__", "abc", "bisect", "codecs", "collections", "contextlib", "copy", "copyreg",
    "encodings", "enum", "errno", "fcntl", "functools", "gc", "genericpath", "hashlib", "importlib", "io",
    "itertools", "json", "keyword", "locale", "marshal", "math", "operator", "os", "posix",
    "posixpath", "re", "reprlib", "select", "selectors", "signal", "socket", "stat", "struct",
    "subprocess", "threading", "time", "types", "typing", "warnings", "weakref", "zipimport",
}


def _env(tmp_path: Path, job: int) -> dict:
    cfg = tmp_path / "slurmkit.yaml"
    if not cfg.exists():
        write_site_config(tmp_path, sync=True)
        # what `slurmkit install` leaves beside the config: the hooks then never import PyYAML
        from slurmkit import nodesettings
        nodesettings_file = Path(nodesettings.settings_path(str(cfg)))
        nodesettings_file.write_bytes(nodesettings.render(cfg.read_bytes(), str(cfg)))
        shim = tmp_path / "python-importtime"
        shim.write_text(f"#!/bin/sh\nexec {sys.executable} -X importtime \"$@\"\n")
        shim.chmod(0o755)
    return {"SLURMKIT_CONFIG": str(cfg), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN), "SLURMD_NODENAME": "n1",
            "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_USER": "root",
            "SLURM_JOB_GPUS": "0,1", "SLURMKIT_PYTHON": str(tmp_path / "python-importtime")}


def _stdlib_imports(*mods: str) -> set[str]:
    """Modules the standard library itself imports with these: those are not the hooks' to avoid."""
    code = (f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
            f"import {', '.join(mods)}\nprint(*sys.modules)")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def not_allowed(mods: set[str]) -> set[str]:
    """The modules a hook imported that are not on the allowlists (nor what the standard library itself loads on
    this Python for the allowed ones: 3.13 and 3.14 load a few of their own)."""
    base = _stdlib_imports(*sorted(STDLIB_ALLOWED - {"__future__", "posix", "genericpath"}))
    out = set()
    for m in mods:
        top = m.split(".")[0]
        if m in SLURMKIT_ALLOWED or m in HOOK_CHECKS or m in base or (top != "slurmkit" and (top in STDLIB_ALLOWED or top.startswith("_"))):
            continue
        if top in ("org", "msvcrt") or m == "imported package":  # stdlib probes (copy, subprocess); the header
            continue
        out.add(m)
    return out


def _hook(which: str, env: dict) -> tuple[subprocess.CompletedProcess, set[str]]:
    r = subprocess.run([str(REPO / which / which)], env=env, capture_output=True, text=True, timeout=120)
    mods = {ln.rsplit("|", 1)[1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    return r, mods


def test_hooks_import_only_the_allowlist_and_start_the_sampler_detached(tmp_path):
    env = _env(tmp_path, 4242)
    _hook("prolog", dict(env, SLURM_JOB_ID="4241"))  # a first run (the sampler, the kernel-log mark)
    r, mods = _hook("epilog", dict(env, SLURM_JOB_ID="4241"))
    assert r.returncode == 0, r.stderr
    # the check modules are seen (the runner imports them by the path -X importtime reads): a check module the
    # registry did not put in a hook profile, or one of their imports not listed, fails here
    assert {"slurmkit.health.checks.xid", "slurmkit.health.checks.gpu_procs"} <= mods, sorted(mods)
    assert not not_allowed(mods), sorted(not_allowed(mods))
    r, mods = _hook("prolog", env)
    assert r.returncode == 0, r.stderr
    assert "slurmkit.health.checks.gpu_count" in mods, sorted(mods)
    assert mods and not not_allowed(mods), sorted(not_allowed(mods))
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
    # the sampler is an interpreter of its own: on a loaded machine its file may not be there yet
    while time.monotonic() < deadline and not (samples.exists() and b"\n[" in samples.read_bytes()):
        time.sleep(0.2)  # the sampler's first sample (the fake nvidia-smi's series)
    assert b"\n[" in samples.read_bytes()
    r, mods = _hook("epilog", env)
    assert r.returncode == 0, r.stderr
    assert not not_allowed(mods), " ".join(sorted(not_allowed(mods)))
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    # the job's efficiency record (beside the per-node health log) says what its sampler cost the node
    recs = [json.loads(ln) for ln in (tmp_path / "efficiency" / "n1.jsonl").read_text().splitlines()]
    (rec,) = [x for x in recs if x.get("job_id") == 4242]
    assert 0 <= rec["sampler_cpu_seconds"] < 5, rec
    assert started > 0


def test_one_hook_script_whose_name_says_which_hook_it_is(tmp_path):
    """prolog/prolog, epilog/epilog and health/health are the one bin/slurmkit-hook; a copy under a name that says
    none of the three refuses to guess (exit 2, the message says what to name it) instead of running some hook."""
    one = (REPO / "bin" / "slurmkit-hook").resolve()
    assert all((REPO / h / h).resolve() == one for h in ("prolog", "epilog", "health"))
    odd = tmp_path / "slurm-hook.sh"
    shutil.copy(one, odd)
    r = subprocess.run([str(odd)], env={}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "name it prolog, epilog or health" in r.stderr, r


def test_the_hook_module_is_one_word_of_the_command_line(tmp_path):
    """`pgrep -f slurmkit.hooks.epilog` finds the epilog (and the sync children it forks, which keep its command
    line): the one script passes the module's name to Python as an argument of its own."""
    py = tmp_path / "python"
    py.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    py.chmod(0o755)
    for hook in ("prolog", "epilog", "health"):
        r = subprocess.run([str(REPO / hook / hook)], env={"SLURMKIT_PYTHON": str(py)}, capture_output=True,
                           text=True, timeout=30)
        assert f"slurmkit.hooks.{hook}" in r.stdout.splitlines(), r
