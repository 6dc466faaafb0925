"""The job spec's checks beyond types: a time format, a valid environment name, the signal lead inside the time
limit, a sweep's size, sbatch option names, a template path; each error names the line of the key it is about."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..times import seconds as time_seconds

if TYPE_CHECKING:
    from .spec import JobSpec

# Validation patterns match the whole value (`\Z`, not `$`, which lets a trailing newline through) and ASCII
# digits only (`\d` is any Unicode digit: "٣:٠٠:٠٠" is not a Slurm time). Numbers have a bounded length.
NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
MEM_RE = re.compile(r"\A[0-9]{1,15}[KMGTkmgt]?\Z")
UNLIMITED = ("infinite", "unlimited")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
# an sbatch option name: --long-name or -x; its value, if any, after `=`
SBATCH_OPT_RE = re.compile(r"\A(?:--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z])\Z")
MAX_SWEEP = 10000


def validate(spec: JobSpec, set_keys=frozenset()) -> None:
    """The checks beyond types, in phases; each raises the spec's error for the key it is about (file:line, or
    `--set key` when --set gave the value). `set_keys` is kept for callers; the spec knows its own."""
    _check_command_and_lines(spec)
    _check_resources(spec)
    limit = _check_time(spec)
    _check_env(spec)
    _check_preemption(spec, limit)
    _check_container(spec)
    _check_sweep(spec)
    _check_sbatch(spec)
    _check_template(spec)


def _check_command_and_lines(spec: JobSpec) -> None:
    fail = _failer(spec)
    if spec.command is None or spec.command == "" or spec.command == []:
        fail("command", "a job needs a command (a string of shell text, or a list of arguments)")
    if isinstance(spec.command, list):
        for i, a in enumerate(spec.command):
            if "\0" in a:
                fail(f"command[{i}]", "contains a NUL byte")
    elif isinstance(spec.command, str) and "\0" in spec.command:
        fail("command", "contains a NUL byte")
    # values that end up on #SBATCH lines: one line each, no NUL
    for key in ("name", "partition", "account", "qos", "workdir", "output", "checkpoint_dir", "template"):
        v = getattr(spec, key)
        if v is not None:
            if v == "":
                fail(key, "is empty")
            if any(c in v for c in "\n\r\0"):
                fail(key, "must be a single line")
    if spec.name is not None and len(spec.name) > 200:
        fail("name", "is longer than 200 characters")


def _failer(spec: JobSpec):
    def fail(key: str, msg: str):
        raise spec.error(key, msg)

    return fail


def _check_resources(spec: JobSpec) -> None:
    fail = _failer(spec)
    for key in ("nodes",):
        if getattr(spec, key) < 1:
            fail(key, "must be at least 1")
    if spec.gpus_per_node < 0:
        fail("gpus_per_node", "must be 0 or more")
    if spec.tasks_per_node is not None and spec.tasks_per_node < 1:
        fail("tasks_per_node", "must be at least 1")
    if isinstance(spec.cpus_per_gpu, int) and spec.cpus_per_gpu < 1:
        fail("cpus_per_gpu", "must be at least 1 (or `auto`)")
    if spec.mem is not None and not MEM_RE.fullmatch(spec.mem):
        fail("mem", f"expected a size like 64G, 512M or 0 (all of the node), got {spec.mem!r}")
    if spec.launcher == "torchrun" and spec.gpus_per_node == 0 and spec.torchrun.nproc_per_node is None:
        fail("torchrun.nproc_per_node", "torchrun with gpus_per_node: 0 needs torchrun.nproc_per_node")
    if spec.launcher in ("accelerate", "deepspeed") and spec.gpus_per_node < 1:
        fail("gpus_per_node", f"launcher {spec.launcher} starts one process per GPU: needs gpus_per_node of 1 or more")
    if spec.launcher == "accelerate" and spec.tasks_per_node not in (None, 1):
        fail("tasks_per_node", "launcher accelerate runs one `accelerate launch` per node: leave tasks_per_node unset")
    if spec.launcher == "deepspeed" and spec.tasks_per_node not in (None, spec.gpus_per_node):
        fail("tasks_per_node", "launcher deepspeed runs one task per GPU: leave tasks_per_node unset")
    if spec.torchrun.rdzv_port is not None and not 1024 <= spec.torchrun.rdzv_port <= 65535:
        fail("torchrun.rdzv_port", "must be between 1024 and 65535")
    if spec.torchrun.nproc_per_node is not None and spec.torchrun.nproc_per_node < 1:
        fail("torchrun.nproc_per_node", "must be at least 1")


def _check_time(spec: JobSpec) -> int | None:
    """The time limit in seconds (None: unset or unlimited)."""
    fail = _failer(spec)
    limit = None
    if spec.time is not None and spec.time.lower() not in UNLIMITED:
        try:
            limit = time_seconds(spec.time)
        except ValueError:
            fail("time", f"expected a Slurm time (MM, HH:MM:SS, D-HH:MM..., or UNLIMITED), got {spec.time!r}")
        if limit == 0:
            fail("time", "must be more than 0")
    return limit


def _check_env(spec: JobSpec) -> None:
    fail = _failer(spec)
    for k, v in spec.env.items():
        if not NAME_RE.fullmatch(k):
            fail(f"env.{k}", "is not a valid environment variable name (letters, digits, _)")
        if "\0" in v:
            fail(f"env.{k}", "contains a NUL byte")


def _check_preemption(spec: JobSpec, limit: int | None) -> None:
    fail = _failer(spec)
    p = spec.preemption
    if p.signal_lead is not None:
        if p.signal_lead < 1 or p.signal_lead > 65535:
            fail("preemption.signal_lead", "must be between 1 and 65535 seconds")
        if limit is not None and p.signal_lead >= limit:
            fail("preemption.signal_lead", f"{p.signal_lead}s is not inside the time limit {spec.time} ({limit}s)")
    if p.max_requeues is not None and p.max_requeues < 0:
        fail("preemption.max_requeues", "must be 0 or more")
    if p.grace is not None and p.grace < 0:
        fail("preemption.grace", "must be 0 or more")


def _check_container(spec: JobSpec) -> None:
    fail = _failer(spec)
    if spec.container is not None:
        if not spec.container.image.strip() or any(c in spec.container.image for c in "\n\r\0"):
            fail("container.image", "must be a non-empty single line")
        for i, m in enumerate(spec.container.mounts):
            if not m or any(c in m for c in ",\n\r\0"):
                fail(f"container.mounts[{i}]", "must be SRC:DST[:FLAGS] without commas or newlines")


def _check_sweep(spec: JobSpec) -> None:
    fail = _failer(spec)
    for k, vals in spec.sweep.items():
        if not NAME_RE.fullmatch(k):
            fail(f"sweep.{k}", "is not a valid environment variable name (letters, digits, _)")
        if k in spec.env:
            fail(f"sweep.{k}", "is also set in env")
        if not vals:
            fail(f"sweep.{k}", "needs at least one value")
        for v in vals:
            if any(c in v for c in "\0"):
                fail(f"sweep.{k}", "contains a NUL byte")
    n = 1
    for vals in spec.sweep.values():
        n *= max(1, len(vals))
    if spec.sweep and n > MAX_SWEEP:
        fail("sweep", f"expands to {n} array tasks (at most {MAX_SWEEP})")
    if spec.sweep_parallel is not None:
        if spec.sweep_parallel < 1:
            fail("sweep_parallel", "must be at least 1")
        if not spec.sweep:
            fail("sweep_parallel", "only makes sense with a sweep")


def _check_sbatch(spec: JobSpec) -> None:
    fail = _failer(spec)
    for i, opt in enumerate(spec.sbatch):
        if any(c in opt for c in "\n\r\0"):
            fail(f"sbatch[{i}]", "must be a single line")
        optname = opt.split("=", 1)[0]
        if not SBATCH_OPT_RE.fullmatch(optname):
            fail(
                f"sbatch[{i}]",
                f"expected an sbatch option like --exclusive or --constraint=h100 (one name of "
                f"letters, digits and -, then =value), got {opt!r}",
            )
        if optname in ("--array", "-a") and spec.sweep:
            fail(f"sbatch[{i}]", "--array is made from `sweep`; do not set both")


def _check_template(spec: JobSpec) -> None:
    """A template is a name from the search path or a relative path below the spec's directory (the renderer
    also checks where links lead)."""
    t = spec.template
    if t is not None and "/" in t and (t.startswith("/") or t.startswith("~") or ".." in t.split("/")):
        raise spec.error(
            "template",
            f"{t!r}: a template is a name from the template search path or a path "
            "below the spec's directory (no absolute path, no ..)",
        )
