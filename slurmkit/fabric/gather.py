"""Gathering each node's `nvidia-smi -q` for NVLink domains as Slurm job steps (the capture edge of `slurmkit
fabric --gather`): one `srun` per node, exclusive (a step without the node's GPUs sees none under
ConstrainDevices), its output read back here, so no shared directory is needed. At most `parallel` at a time,
each under `timeout` seconds, through proc.run: argv lists, no shell."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..errors import CommandError
from ..proc import run, tool


def srun_argv(host: str, nvidia_smi, *, partition: str | None = None, minutes: int = 5) -> list[str]:
    argv = [
        "srun",
        "--job-name=slurmkit-fabric-nvsmi",
        f"--nodelist={host}",
        "--nodes=1",
        "--ntasks=1",
        "--exclusive",
        f"--time={minutes}",
        "--quiet",
    ]
    if partition:
        argv.append(f"--partition={partition}")
    return [*argv, *tool(nvidia_smi, "-q")]


def gather(
    hosts: list[str], nvidia_smi, *, timeout: float, partition: str | None = None, parallel: int = 16
) -> tuple[dict[str, str], dict[str, str]]:
    """({host: its nvidia-smi -q}, {host: why nothing came back}). A node whose step failed or timed out is in
    the second: the caller cannot know its domain."""

    def one(host: str) -> tuple[str, str | None, str]:
        try:
            r = run(srun_argv(host, nvidia_smi, partition=partition), timeout=timeout, check=False)
        except CommandError as e:
            return host, None, str(e)
        if r.returncode != 0:
            detail = (r.stderr or r.stdout).strip().splitlines()
            return host, None, detail[-1] if detail else f"srun exit code {r.returncode}"
        return host, r.stdout, ""

    got, failed = {}, {}
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        for host, text, why in pool.map(one, hosts):
            if text is None:
                failed[host] = why
            else:
                got[host] = text
    return got, failed
