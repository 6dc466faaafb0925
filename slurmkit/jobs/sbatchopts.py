"""The sbatch options a spec asks for, by name and in a fixed order (golden files): the base ones (name, partition,
nodes, GPUs), the keys that are sbatch options of their own (issue 30: dependency, typed GPUs, mem_per_gpu,
constraint, exclude, nodelist, mail, comment), and the spec's raw `sbatch:` items after them. Values are quoted for
Slurm's `#SBATCH` parser (not the shell's) only when the lines are written; the spec check has already refused
what no quoting makes safe (newlines, NUL) and checked each key's grammar (keys.py)."""

from __future__ import annotations

import re

from .spec import JobSpec

_SLURM_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+", re.ASCII)


def slurm_quote(value: str) -> str:
    """`value` as one word for Slurm's `#SBATCH` parser (sbatch's opt.c `_get_argument`), which is not the
    shell's: a backslash escapes the next character even inside quotes, an unquoted `#` starts a comment, and
    whitespace ends a word unless quoted. So: single quotes around it, with `\\` and `'` backslash-escaped.
    (Those lines are comments to bash: only Slurm reads them.) Newlines never get here (the spec refuses them)."""
    if value and _SLURM_SAFE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sbatch_opt(name: str, value: str | None = None) -> str:
    """One `#SBATCH` option: the name as checked by the spec, the value quoted for Slurm's parser."""
    return name if value is None else f"{name}={slurm_quote(str(value))}"


class Options:
    """sbatch options by name, in a fixed order (golden files): the raw value (None for a flag), quoted for
    Slurm's `#SBATCH` parser only when the lines are written."""

    def __init__(self):
        self.raw: dict[str, str | None] = {}

    def put(self, name: str, value=None) -> None:
        self.raw[name] = None if value is None else str(value)

    def lines(self) -> list[str]:
        return [sbatch_opt(n, v) for n, v in self.raw.items()]

    def cpus_per_node(self, gpn: int, tasks: int) -> int | None:
        """What the options ask of each node (for the check against the cluster), from the values themselves."""
        out = None
        for oname, per in (("--cpus-per-gpu", gpn), ("--cpus-per-task", tasks)):
            v = self.raw.get(oname)
            if v is not None and v.isascii() and v.isdigit():
                out = int(v) * per
        return out


def base_options(sb: Options, spec: JobSpec, name: str, partition, tasks: int) -> None:
    sb.put("--job-name", name)
    if partition:
        sb.put("--partition", partition)
    if spec.account:
        sb.put("--account", spec.account)
    if spec.qos:
        sb.put("--qos", spec.qos)
    sb.put("--nodes", spec.nodes)
    sb.put("--ntasks-per-node", tasks)
    if spec.gpus_per_node:
        sb.put("--gpus-per-node", spec.gpus_per_node)


def key_options(sb: Options, spec: JobSpec) -> None:
    """The keys that are sbatch options of their own; after the binding, whose --gpus-per-node a type replaces."""
    from .keys import as_list, dependency_text

    if spec.gpu_type and spec.gpus_per_node:
        sb.put("--gpus-per-node", f"{spec.gpu_type}:{spec.gpus_per_node}")
    if spec.mem_per_gpu:
        sb.put("--mem-per-gpu", spec.mem_per_gpu)
    if spec.dependency is not None:
        sb.put("--dependency", dependency_text(spec.dependency))
        if not any(o.partition("=")[0] == "--kill-on-invalid-dep" for o in spec.sbatch):
            sb.put("--kill-on-invalid-dep", "yes")  # a dependency that can never be met ends the job, not waits
    if spec.constraint:
        sb.put("--constraint", spec.constraint)
    if as_list(spec.nodelist):
        sb.put("--nodelist", ",".join(as_list(spec.nodelist)))
    if as_list(spec.exclude):
        sb.put("--exclude", ",".join(as_list(spec.exclude)))
    if spec.mail is not None:
        sb.put("--mail-type", ",".join(as_list(spec.mail.type)))
        if spec.mail.user:
            sb.put("--mail-user", spec.mail.user)
    if spec.comment is not None:
        sb.put("--comment", spec.comment)


def extra_options(sb: Options, spec: JobSpec) -> list[str]:
    """The spec's own `sbatch:` options, after ours (the name was checked by the spec: one option, no spaces)."""
    out = []
    for raw in spec.sbatch:
        oname, eq, oval = raw.partition("=")
        if not eq and oname in sb.raw and sb.raw[oname] is None:
            continue  # already there (e.g. --exclusive from the binding)
        out.append(sbatch_opt(oname, oval if eq else None))
    return out
