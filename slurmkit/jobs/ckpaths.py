"""A job's checkpoint paths per job and per array task (issue 29): `checkpoint_dir` and `checkpoint.durable` may
name `{job_id}`, `{array_job_id}`, `{array_task_id}`, `{name}`, `{user}` (and `{node}`, the node-local part), and
`$VARIABLE`s of the job's environment. The sbatch script carries the template (single-quoted: the shell never
expands it); `slurmkit run` expands it at run time from the job's variables, which Slurm keeps across requeues (a
requeued job has the same job id and task id), so a requeued run finds its own checkpoints and no other's.

Pure: `expand` (run time), `problems` (render time: unknown placeholders and variables, a sweep's tasks sharing
one directory), `per_task_default` (a sweep's default: one directory per task).
"""

from __future__ import annotations

import re

# placeholder -> the job's variables it reads, first one set wins
PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    "job_id": ("SLURM_JOB_ID",),
    "array_job_id": ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID"),
    "array_task_id": ("SLURM_ARRAY_TASK_ID",),
    "name": ("SLURM_JOB_NAME",),
    "user": ("SLURM_JOB_USER", "USER"),
    "node": ("SLURMD_NODENAME",),
}
# $VARIABLES a path may use: set by Slurm in every job (or by the spec's env:)
RUN_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_USER",
    "SLURMD_NODENAME",
    "SLURM_CLUSTER_NAME",
    "USER",
    "HOME",
    "TMPDIR",
)
# what makes a path differ between the tasks of one array
PER_TASK: tuple[str, ...] = (
    "{job_id}",
    "{array_task_id}",
    "$SLURM_JOB_ID",
    "${SLURM_JOB_ID}",
    "$SLURM_ARRAY_TASK_ID",
    "${SLURM_ARRAY_TASK_ID}",
)

_PH_RE = re.compile(r"(?<!\$)\{([^{}]*)\}")
_VAR_RE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


class PathError(ValueError):
    """A path template that cannot be expanded: the message says which placeholder or variable."""


def placeholders(path: str) -> list[str]:
    return [m.group(1) for m in _PH_RE.finditer(path)]


def variables(path: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in _VAR_RE.finditer(path)]


def per_task(path: str) -> bool:
    return any(p in path for p in PER_TASK)


def problems(path: str, *, sweep: bool, env_keys: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with a path template at render time (empty: fine). Pure."""
    out = []
    for ph in placeholders(path):
        if ph not in PLACEHOLDERS:
            out.append(
                f"unknown placeholder {{{ph}}} (expected one of {', '.join('{' + p + '}' for p in PLACEHOLDERS)})"
            )
        elif ph == "array_task_id" and not sweep:
            out.append("{array_task_id} in a job that is not a sweep (no array task id)")
    for var in variables(path):
        if var not in RUN_VARIABLES and var not in env_keys:
            out.append(
                f"${var} is not set in the job (use a placeholder, one of Slurm's variables "
                f"{', '.join('$' + v for v in RUN_VARIABLES[:6])}, or set it under env:)"
            )
    if "$" in _VAR_RE.sub("", path):
        out.append("a '$' that is not a $VARIABLE")
    return out


def per_task_default(path: str, sweep: bool) -> tuple[str, str | None]:
    """A sweep's checkpoint path that every task would share gets `/{array_task_id}` appended (each task its own
    directory, stable across its requeues); returns (path, note or None). Pure."""
    if not sweep or per_task(path):
        return path, None
    new = path.rstrip("/") + "/{array_task_id}"
    return new, f"every task of the sweep would share {path}: each task gets its own, {new}"


def expand(path: str, environ: dict[str, str]) -> str:
    """The path for this job (run time). Raises PathError naming what is missing. Pure."""

    def ph(m: re.Match) -> str:
        name = m.group(1)
        if name not in PLACEHOLDERS:
            raise PathError(f"{path}: unknown placeholder {{{name}}}")
        for var in PLACEHOLDERS[name]:
            if environ.get(var):
                return _safe(environ[var], path, "{" + name + "}")
        raise PathError(f"{path}: {{{name}}} needs ${PLACEHOLDERS[name][0]}, which this job does not have")

    def var(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if not environ.get(name):
            raise PathError(f"{path}: ${name} is not set in this job")
        return _safe(environ[name], path, "$" + name)

    if "$" in _VAR_RE.sub("", path):
        raise PathError(f"{path}: a '$' that is not a $VARIABLE")
    return _VAR_RE.sub(var, _PH_RE.sub(ph, path))


def _safe(value: str, path: str, what: str) -> str:
    if "/" in value and what not in ("$HOME", "$TMPDIR") or value in (".", "..") or "\0" in value:
        raise PathError(f"{path}: {what}={value!r} cannot be one path component")
    return value


def for_spec(spec, tasks: int, notes: list[str]):
    """The job spec with its checkpoint paths checked (SpecError naming the file and line) and, for a sweep of
    `tasks` array tasks, made per task where they would be shared; notes say what each task gets. Returns (spec,
    [what each path expands to, for the script's comment])."""
    from ..record import replace

    env_keys = tuple(spec.env)
    sweep = tasks > 0
    new = {}
    shown_all = []
    for key, value in (("checkpoint_dir", spec.checkpoint_dir), ("checkpoint.durable", spec.checkpoint.durable)):
        if not value:
            continue
        bad = problems(value, sweep=sweep, env_keys=env_keys)
        if bad:
            raise spec.error(key, "; ".join(bad))
        value, why = per_task_default(value, sweep)
        if why:
            notes.append(f"{key}: {why}")
        if placeholders(value) or variables(value):
            shown = value.replace("{array_task_id}", "{0.." + str(tasks - 1) + "}") if sweep else value
            notes.append(f"{key}: {shown} (expanded by `slurmkit run` in the job; stable across requeues)")
            shown_all.append(f"{key}: {shown}")
        new[key] = value
    if not new:
        return spec, shown_all
    durable = new.get("checkpoint.durable", spec.checkpoint.durable)
    return replace(
        spec,
        checkpoint_dir=new.get("checkpoint_dir", spec.checkpoint_dir),
        checkpoint=replace(spec.checkpoint, durable=durable),
    ), shown_all
