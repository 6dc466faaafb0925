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
    _check_keys(spec)
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
    for key in (
        "name",
        "partition",
        "account",
        "qos",
        "workdir",
        "output",
        "checkpoint_dir",
        "template",
        "comment",
    ):
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


def _check_keys(spec: JobSpec) -> None:
    """The keys that are sbatch options of their own (issue 30): each value checked by its grammar (keys.py),
    then the combinations Slurm would refuse, or do something else with, than what the spec says."""
    from . import keys

    fail = _failer(spec)

    def check(key: str, fn, value):
        try:
            return fn(value)
        except ValueError as e:
            fail(key, str(e))

    if spec.dependency is not None:
        check("dependency", keys.dependency_text, spec.dependency)
    if spec.gpu_type is not None:
        check("gpu_type", keys.check_gpu_type, spec.gpu_type)
        if spec.gpus_per_node < 1:
            fail("gpu_type", "is set, but gpus_per_node is 0 (a GPU type needs GPUs)")
    if spec.mem_per_gpu is not None:
        if not MEM_RE.fullmatch(spec.mem_per_gpu):
            fail("mem_per_gpu", f"expected a size like 80G or 512M, got {spec.mem_per_gpu!r}")
        if spec.mem is not None:
            fail("mem_per_gpu", "is set together with mem: Slurm takes one of --mem and --mem-per-gpu; remove one")
        if spec.gpus_per_node < 1:
            fail("mem_per_gpu", "is set, but gpus_per_node is 0 (memory per GPU needs GPUs)")
    if spec.constraint is not None:
        check("constraint", keys.check_constraint, spec.constraint)
    hosts: dict[str, list[str]] = {}
    for key in ("nodelist", "exclude"):
        items = keys.as_list(getattr(spec, key))
        setattr(spec, key, items)
        for i, item in enumerate(items):
            if not item.strip():
                fail(f"{key}[{i}]", "is empty")
        hosts[key] = check(key, keys.check_hosts, items) or []
    both = sorted(set(hosts["nodelist"]) & set(hosts["exclude"]))
    if both:
        fail(
            "exclude", f"{', '.join(both)} {'is' if len(both) == 1 else 'are'} also in nodelist: a host cannot be both"
        )
    if hosts["nodelist"] and len(hosts["nodelist"]) > spec.nodes:
        fail(
            "nodelist",
            f"names {len(hosts['nodelist'])} hosts, but nodes is {spec.nodes} (Slurm would allocate every host "
            "in nodelist); raise nodes or name fewer hosts",
        )
    if spec.mail is not None:
        spec.mail.type = check("mail.type", keys.mail_types, spec.mail.type)
        if spec.mail.user is not None:
            check("mail.user", keys.check_mail_user, spec.mail.user)
    spec.setup = keys.as_list(spec.setup)
    for i, line in enumerate(spec.setup):
        if "\0" in line:
            fail(f"setup[{i}]", "contains a NUL byte")
        if not line.strip():
            fail(f"setup[{i}]", "is empty")


# the sbatch options each spec key writes (long and short names): a raw `sbatch:` item naming one of them while the
# key is set is refused (which one would Slurm take? the last, silently, and the pre-check would judge the other)
OWNED_OPTIONS = {
    "partition": ("--partition", "-p"),
    "account": ("--account", "-A"),
    "qos": ("--qos", "-q"),
    "time": ("--time", "-t"),
    "mem": ("--mem", "--mem-per-gpu", "--mem-per-cpu"),
    "mem_per_gpu": ("--mem-per-gpu", "--mem", "--mem-per-cpu"),
    "gpu_type": ("--gpus-per-node", "--gpus", "-G"),  # and --gres=gpu:... (below)
    "dependency": ("--dependency", "-d"),
    "constraint": ("--constraint", "-C"),
    "exclude": ("--exclude", "-x"),
    "nodelist": ("--nodelist", "-w"),
    "mail": ("--mail-type", "--mail-user"),
    "comment": ("--comment",),
}


def _check_sbatch(spec: JobSpec) -> None:
    fail = _failer(spec)
    owner: dict[str, str] = {}
    for k, names in OWNED_OPTIONS.items():
        if getattr(spec, k) not in (None, []):
            for n in names:
                owner.setdefault(n, k)
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
        key = owner.get(optname)
        if key is None and optname == "--gres" and spec.gpu_type and "gpu" in opt.partition("=")[2]:
            key = "gpu_type"
        if key is not None:
            line = spec.lines.get(key)
            where = f" (line {line})" if line and key not in spec.set_keys else ""
            fail(f"sbatch[{i}]", f"{opt} sets what the key `{key}`{where} sets: keep one of them")


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
