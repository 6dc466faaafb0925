"""Heavy checks as Slurm jobs: one exclusive, low-priority job per node that runs the heavy checks (NCCL
all_reduce_perf, DCGM diagnostics) on all of its GPUs, so the scheduler decides when a node is free and no user job
waits behind a check. Pure: which nodes to sweep and the job script; submitting is the command's."""

from __future__ import annotations

import shlex

HEAVY = ("nccl", "dcgm")


def targets(records, wanted: set[str] | None, partition: str | None) -> tuple[list, list[tuple[str, str]]]:
    """(records to sweep, [(node, why not)]): nodes that can run a job now or later; a drained, down or
    maintenance node is left out with the reason (a slurmkit drain is rechecked with `audit resume --recheck`)."""
    take, left = [], []
    for r in records:
        if wanted is not None and r.name not in wanted:
            continue
        if partition is not None and partition not in r.partitions:
            continue
        flags = set(r.flags)
        if r.state == "DOWN" or "NOT_RESPONDING" in flags:
            left.append((r.name, f"{r.state_text}: not swept"))
        elif r.drained or "DRAIN" in flags or "FAIL" in flags:
            left.append(
                (
                    r.name,
                    f"drained ({r.reason or 'no reason'}): recheck it with `slurmkit audit resume --recheck {r.name}`",
                )
            )
        elif flags & {"MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN"}:
            left.append((r.name, f"{r.state_text}: not swept"))
        else:
            take.append(r)
    return take, left


def _whole_nodes(
    time_limit: str, nice: int, output: str, own: str, gpus: int, partition: str | None, qos: str | None
) -> list[str]:
    """The options every sweep job has: its nodes whole (all their GPUs), low priority, its own output; `own`, the
    one option of its kind of job, goes before the GPUs, partition and QOS."""
    opts = ["--exclusive", f"--time={time_limit}", f"--nice={nice}", f"--output={output}", own]
    if gpus:
        opts.append(f"--gres=gpu:{gpus}")
    if partition:
        opts.append(f"--partition={partition}")
    if qos:
        opts.append(f"--qos={qos}")
    return opts


def script(
    node: str,
    gpus: int,
    *,
    checks: tuple[str, ...],
    slurmkit_bin: str,
    config: str | None,
    time_limit: str,
    partition: str | None,
    qos: str | None,
    nice: int,
    output: str,
) -> str:
    """The sbatch script of one node's sweep job. Every value is quoted; node names and config come from Slurm and
    the site config, never from a job's user."""
    opts = [
        f"--job-name=slurmkit-health-{node}",
        f"--nodelist={node}",
        "--nodes=1",
        *_whole_nodes(time_limit, nice, output, "--requeue", gpus, partition, qos),
    ]
    argv = [
        slurmkit_bin,
        *(["--config", config] if config else []),
        "health",
        "--run-heavy",
        "--checks",
        ",".join(checks),
        "--node",
        node,
    ]
    lines = ["#!/bin/bash", f"# slurmkit health sweep of {node}: heavy checks when the scheduler frees the node"]
    lines += [f"#SBATCH {shlex.quote(o)}" for o in opts]
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines) + "\n"


def pair_output(out_dir: str, a: str, b: str) -> str:
    """Where a pair's job writes all_reduce_perf's output (`+` is in no host name: the file names its pair)."""
    return f"{out_dir.rstrip('/')}/{a}+{b}.out"


def pair_script(
    a: str,
    b: str,
    gpus: int,
    *,
    tool: list[str],
    args: list[str],
    time_limit: str,
    partition: str | None,
    qos: str | None,
    nice: int,
    output: str,
) -> str:
    """The sbatch script of one pair of the NCCL pairs sweep: both nodes whole, one task per node (each driving
    the node's GPUs: all_reduce_perf's `-g` in nccl.args), all_reduce_perf across the two under srun. Node names
    come from Slurm, the tool and arguments from the site config; every value is quoted."""
    opts = [
        f"--job-name=slurmkit-nccl-pair-{a}-{b}",
        f"--nodelist={a},{b}",
        "--nodes=2",
        "--ntasks-per-node=1",
        *_whole_nodes(time_limit, nice, output, "--open-mode=truncate", gpus, partition, qos),
    ]
    lines = ["#!/bin/bash", f"# slurmkit NCCL pairs sweep: all_reduce_perf between {a} and {b}"]
    lines += [f"#SBATCH {shlex.quote(o)}" for o in opts]
    srun = ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *tool, *args]
    lines.append("exec " + " ".join(shlex.quote(x) for x in srun))
    return "\n".join(lines) + "\n"
