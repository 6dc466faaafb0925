"""JobSpec -> sbatch script text, through a Jinja template (StrictUndefined).

Deciding is pure Python here (`plan`): which sbatch options, which environment, how the command is launched.
Every value from the spec is quoted here, with shlex.quote, before a template sees it; the one exception is a
command the user wrote as a string, which is shell text by definition and reaches the shell as written.
(sbatch's own `#SBATCH` parser understands the same single quotes and backslashes, so quoted values survive there
too; newlines are refused by the spec check.) The templates only lay the pieces out.
"""

from __future__ import annotations

import re
import shlex
from ..record import Record, field

from ..errors import UsageError
from .spec import JobSpec
from ..topology.binding import plan_binding
from .profile import load_profile, profile_cpus_per_gpu
from .templates import TEMPLATES, render_template, template_below_spec
from .sbatchopts import Options, base_options, extra_options, key_options, slurm_quote, sbatch_opt  # noqa: F401


q = shlex.quote
RENDEZVOUS_LAUNCHERS = ("torchrun", "accelerate", "deepspeed")
SETUP_MARK = "# setup from the spec"  # the base template's line before the setup lines (see render())
ARGS = ' "$@"'  # bash -c 'launcher ... "$@"' NAME ARGV...: the argv reaches the launcher unquoted by a shell


class Rendered(Record, kw_only=False):
    """An sbatch script rendered from a spec, with what went into it (template, context, profile, notes)."""

    script: str
    template: str
    notes: list[str] = field(default_factory=list)
    partition: str | None = None
    cpus_per_node: int | None = None  # what the options ask of each node, for the check against the cluster
    context: dict = field(default_factory=dict)
    profile_path: str | None = None  # the topology profile read, if any


def opt(name: str, value=None) -> str:
    """One srun option for the command line, its value shell-quoted: opt('--x', "it's") -> --x='it'"'"'s'."""
    return name if value is None else f"{name}={q(str(value))}"


# --- the plan: everything the template needs, already quoted -------------------------------------------------------


def plan(
    spec: JobSpec, settings, *, spec_name: str = "job", placement: tuple[list[str], str] | None = None
) -> Rendered:
    """Everything the template needs, already quoted: the phases below, in order. `placement`: the options that
    keep the nodes together and why (jobs/placing.py), or None (not decided: nothing added, nothing said)."""
    notes: list[str] = []
    sub = settings.submit
    partition = spec.partition or sub.default_partition
    name = spec.name or _name_from_file(spec, spec_name)
    if spec.container is not None and not sub.containers:
        raise spec.error(  # `--set container...` is named as such, not as a line of the spec file
            "container.image",
            "this site runs no container plugin (set submit.containers: true in "
            "the site config where pyxis/enroot is installed)",
        )
    tasks, gpus_per_task = _shape(spec)
    sb = Options()
    base_options(sb, spec, name, partition, tasks)
    srun_bind, bind_env, profile_path = _bind(sb, spec, settings, partition, tasks, gpus_per_task, notes)
    key_options(sb, spec)
    placement_note = ""
    if placement is not None:
        for o in placement[0]:
            oname, _, oval = o.partition("=")
            sb.put(oname, oval or None)
        notes.append(f"placement: {placement[1]}")
        if sub.placement:  # the script says why, only where the site turned placement on (golden scripts)
            placement_note = comment_line(placement[1])
    lead = _preemption(sb, spec, sub)
    grid = spec.sweep_grid()
    ck_paths: list[str] = []
    if spec.checkpoint_dir:
        from .ckpaths import for_spec  # issue 29: paths per job and task, checked

        spec, ck_paths = for_spec(spec, len(grid), notes)
    if grid:
        sb.put("--array", f"0-{len(grid) - 1}" + (f"%{spec.sweep_parallel}" if spec.sweep_parallel else ""))
    cpus_per_node = sb.cpus_per_node(spec.gpus_per_node, tasks)
    sbatch_lines = sb.lines() + extra_options(sb, spec)
    env, sweep = _environment_vars(spec, bind_env, grid)
    srun, launcher = _srun_options(spec, srun_bind, notes)
    launch, wrapper = _launch(spec, sub, launcher, srun, tasks, notes)

    kind = "torchrun" if launcher == "torchrun" else ("sweep" if grid else "single")
    torch = spec.torchrun
    ctx = {
        "spec_file": comment_text(spec_name),
        "placement_note": placement_note,
        "sbatch": sbatch_lines,
        "env": env,
        "sweep": sweep,
        "sweep_count": len(grid),
        "checkpoint_paths": [comment_text(p) for p in ck_paths],
        "launch": launch,
        "launcher": launcher,
        "wrapped": wrapper,
        "signal_lead": lead,
        "setup": list(spec.setup),  # shell text by definition, like a string command: as written
        "rdzv_port": str(torch.rdzv_port) if torch.rdzv_port else "$((20000 + SLURM_JOB_ID % 20000))",
        # MASTER_ADDR/MASTER_PORT: every multi-node job and every rendezvous launcher, whatever else is set (a
        # spec's own env.MASTER_ADDR wins; MASTER_PORT from the job's environment is kept)
        "rendezvous": (spec.nodes > 1 or launcher in RENDEZVOUS_LAUNCHERS) and "MASTER_ADDR" not in spec.env,
        "nodes": spec.nodes,
        "gpus_per_node": spec.gpus_per_node,
        "tasks_per_node": tasks,
        "partition": partition,
        "name": name,
    }
    return Rendered(
        script="",
        template=kind,
        notes=notes,
        partition=partition,
        context=ctx,
        cpus_per_node=cpus_per_node,
        profile_path=profile_path,
    )


def comment_text(text: str) -> str:
    """`text` for a `# ...` line of the script: control characters (a newline would end the comment and start a
    command or an `#SBATCH` line) written as escapes, then shell-quoted for a human to paste."""
    from ..output import printable

    return q(printable(text))


def comment_line(text: str) -> str:
    """Our own text for a `# ...` line: one line, control characters as escapes (no shell quoting)."""
    from ..output import printable

    return printable(text)


def _name_from_file(spec: JobSpec, spec_name: str) -> str:
    """The job name when the spec sets none: the file name without .yaml; held to the spec's one-line rule."""
    name = re.sub(r"\.(ya?ml|json)\Z", "", spec_name) or "job"
    if any(c in name for c in "\n\r\0") or len(name) > 200:
        raise UsageError(
            f"the job name would be the file name {comment_text(spec_name)}, which is not a single line "
            "of at most 200 characters: set `name:` in the spec",
            path=comment_text(spec.source or ""),
        )
    return name


def _shape(spec: JobSpec) -> tuple[int, int]:
    """Tasks per node and GPUs per task (0: the GPUs do not divide evenly into the tasks)."""
    gpn = spec.gpus_per_node
    if spec.launcher in ("srun", "deepspeed"):
        tasks = spec.tasks_per_node or max(gpn, 1)
    else:
        tasks = spec.tasks_per_node or 1
    return tasks, (gpn // tasks if gpn and gpn % tasks == 0 else 0)


def _bind(
    sb: Options, spec: JobSpec, settings, partition, tasks: int, gpus_per_task: int, notes: list[str]
) -> tuple[list[str], dict[str, str], str | None]:
    """CPU/GPU binding from the partition's topology profile: sbatch options (into `sb`), srun options, env, and
    the profile's path (None: no profile)."""
    gpn = spec.gpus_per_node
    launcher = spec.launcher
    srun_bind: list[str] = []
    bind_env: dict[str, str] = {}
    profile, profile_path = load_profile(settings, partition)
    cpus_per_gpu = spec.cpus_per_gpu
    if profile is not None and gpn:
        ngpus = len(profile.get("gpus") or [])
        if ngpus and gpn > ngpus:
            raise spec.error(
                "gpus_per_node",
                f"{gpn} GPUs per node, but the nodes of partition {partition} have "
                f"{ngpus} (topology profile {profile_path})",
            )
        whole = gpn == ngpus
        binding = None
        if whole and gpus_per_task:
            try:
                binding = plan_binding(profile, gpus_per_task, tasks)
            except UsageError as e:
                raise UsageError(
                    f"submit.profiles.{partition}: {profile_path}: {e}",
                    path=settings.source,
                    line=settings.lines.get(f"submit.profiles.{partition}"),
                ) from None
        if binding is not None:
            explicit = isinstance(cpus_per_gpu, int)
            for o in binding.get("sbatch", []):
                oname, _, oval = o.partition("=")
                if oname == "--cpus-per-task" and explicit:
                    continue  # the spec's explicit cpus_per_gpu wins (Slurm takes one of the two)
                sb.put(oname, oval if oval else None)
            srun_bind = [o for o in binding.get("srun", []) if not (explicit and o.startswith("--cpu-bind"))]
            if explicit:
                notes.append("cpus_per_gpu is set in the spec: no --cpu-bind from the profile")
            bind_env = dict(binding.get("env", {}))
            notes.append(
                f"binding from the topology profile {profile_path} for partition {partition}: "
                + "; ".join(
                    f"task {i}: GPUs {t['gpus']} CPUs {_cpus(t['cpus'])}"
                    for i, t in enumerate(binding.get("tasks", []))
                )
            )
            notes.extend(binding.get("notes", []))
            if launcher == "none":
                notes.append(
                    "launcher none: no srun step, so the GPU/CPU binding options are not applied "
                    "(the job owns the whole node)"
                )
        else:
            why = (
                f"{gpn} of the node's {ngpus} GPUs: Slurm picks which ones, so no fixed binding"
                if not whole
                else "the GPUs do not divide evenly into tasks"
                if not gpus_per_task
                else "no binding planner installed"
            )
            notes.append(f"topology profile {profile_path}: CPUs per GPU only ({why})")
            if cpus_per_gpu == "auto":
                cpg = profile_cpus_per_gpu(profile)
                if cpg:
                    sb.put("--cpus-per-gpu", cpg)
    elif gpn:
        notes.append(
            f"no topology profile for partition {partition or '(default)'}: plain options, no CPU/GPU "
            "binding (add one under submit.profiles in the site config)"
        )
    if not srun_bind and launcher == "srun" and gpus_per_task and tasks > 1:
        srun_bind = [f"--gpus-per-task={gpus_per_task}"]  # plain: each task its own GPUs
    if isinstance(cpus_per_gpu, int) and gpn:
        sb.put("--cpus-per-gpu", cpus_per_gpu)
    elif isinstance(cpus_per_gpu, int):
        sb.put("--cpus-per-task", cpus_per_gpu)
    if spec.mem:
        sb.put("--mem", spec.mem)
    if spec.time:
        sb.put("--time", spec.time)
    if spec.workdir:
        sb.put("--chdir", spec.workdir)
    if spec.output:
        sb.put("--output", spec.output)
    return srun_bind, bind_env, profile_path


def _preemption(sb: Options, spec: JobSpec, sub) -> int:
    """Preemption-safe defaults: USR2 `lead` seconds before the time limit, requeue, append to the output."""
    p = spec.preemption
    lead = p.signal_lead if p.signal_lead is not None else sub.signal_lead
    if spec.time and spec.time.lower() not in ("infinite", "unlimited") and lead >= _secs(spec.time):
        raise spec.error(
            "time",
            f"the site default signal lead {lead}s (preemption.signal_lead) is not inside "
            f"the time limit {spec.time}; set preemption.signal_lead",
        )
    if spec.checkpoint_dir and p.grace is not None and lead <= p.grace + 30:
        raise spec.error(
            "preemption.grace",
            f"{p.grace}s to checkpoint needs a signal lead of more than "
            f"{p.grace + 30}s (slurmkit run waits the grace, then requeues), got {lead}s",
        )
    sb.put("--signal", f"B:USR2@{lead}")
    sb.put("--requeue" if p.requeue else "--no-requeue")
    sb.put("--open-mode", "append")
    return lead


def _environment_vars(spec: JobSpec, bind_env: dict[str, str], grid) -> tuple[list, list]:
    env = [(k, q(v)) for k, v in spec.env.items()]
    env += [(k, q(v)) for k, v in bind_env.items() if k not in spec.env]
    if spec.checkpoint_dir:
        env.append(("SLURMKIT_CHECKPOINT_DIR", q(spec.checkpoint_dir)))
    return env, [[(k, q(v)) for k, v in task.items()] for task in grid]


def _srun_options(spec: JobSpec, srun_bind: list[str], notes: list[str]) -> tuple[list[str], str]:
    """srun options (binding, container) and the launcher (a container needs an srun step)."""
    launcher = spec.launcher
    if launcher == "deepspeed":
        # every task sees all of its node's GPUs and picks LOCAL_RANK's, as under DeepSpeed's own launcher
        kept = [o for o in srun_bind if not o.startswith(("--gpu-bind", "--gpus-per-task"))]
        if len(kept) != len(srun_bind):
            notes.append("launcher deepspeed: no per-task GPU binding (each rank picks its GPU by LOCAL_RANK)")
        srun_bind = kept
    srun = [q(o) if "=" not in o else f"{o.partition('=')[0]}={q(o.partition('=')[2])}" for o in srun_bind]
    if spec.container is not None:
        c = spec.container
        srun.append(opt("--container-image", c.image))
        if c.mounts:
            srun.append(opt("--container-mounts", ",".join(c.mounts)))
        if c.workdir:
            srun.append(opt("--container-workdir", c.workdir))
    if launcher == "none" and spec.container is not None:
        launcher = "srun"
        srun.insert(0, "--ntasks=1")
        notes.append("container: the command runs as one task under srun (pyxis needs a step)")
    return srun, launcher


def _launch(spec: JobSpec, sub, launcher: str, srun: list[str], tasks: int, notes: list[str]) -> tuple[str, bool]:
    """The command line: the user's command, under srun/torchrun, under `slurmkit run` with a checkpoint_dir."""
    p = spec.preemption
    gpn = spec.gpus_per_node
    is_text = isinstance(spec.command, str)
    user: str = spec.command if isinstance(spec.command, str) else " ".join(q(a) for a in spec.command or ())
    wrapper = None
    if spec.checkpoint_dir:
        # `slurmkit run` (issue 7): --signal is what Slurm sends (sbatch --signal=B:USR2@lead),
        # --checkpoint-signal what the child gets when asked to checkpoint
        w = [q(sub.slurmkit_bin), "run", "--signal", "USR2", "--checkpoint-signal", q(p.checkpoint_signal)]
        if p.grace is not None:
            w += ["--grace", str(p.grace)]
        w += ["--max-requeues", str(p.max_requeues if p.max_requeues is not None else sub.max_requeues)]
        w += ["--checkpoint-dir", q(spec.checkpoint_dir)]
        if spec.checkpoint.durable:
            w += ["--durable", q(spec.checkpoint.durable)]
        if not p.requeue:
            w.append("--no-requeue")
        wrapper = " ".join(w) + " --"
    else:
        notes.append(
            "no checkpoint_dir: the command runs without `slurmkit run`; USR2 before the time limit is only logged"
        )
    torch = spec.torchrun
    nproc = torch.nproc_per_node or max(gpn // tasks if tasks else gpn, 1)
    if launcher == "torchrun":
        trun = (
            f'{q(torch.bin)} --nnodes="$SLURM_NNODES" --nproc-per-node={nproc} '
            f'--rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"'
        )
        inner = f"{trun} {user}" if not is_text else f"bash -c {q(trun + ' ' + user)}"
        launch = " ".join(["srun", "--kill-on-bad-exit=1", *srun, inner])
    elif launcher == "accelerate":
        procs = spec.nodes * nproc
        acc = (
            f"exec accelerate launch --num_machines={spec.nodes} --num_processes={procs}"
            + (" --multi_gpu" if procs > 1 else "")
            + ' --machine_rank="$SLURM_NODEID" --main_process_ip="$MASTER_ADDR" --main_process_port="$MASTER_PORT"'
            " --rdzv_backend=c10d"
        )
        inner = f"bash -c {q(acc + ' ' + user)}" if is_text else f"bash -c {q(acc + ARGS)} accelerate {user}"
        launch = " ".join(["srun", "--kill-on-bad-exit=1", *srun, inner])
    elif launcher == "deepspeed":
        # one task per GPU under srun (Slurm's binding holds), with the variables deepspeed.init_distributed()
        # reads; not DeepSpeed's own launcher, which reaches other nodes by ssh/pdsh and renumbers the GPUs
        ranks = 'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"; exec python -u'
        inner = f"bash -c {q(ranks + ' ' + user)}" if is_text else f"bash -c {q(ranks + ARGS)} deepspeed {user}"
        launch = " ".join(["srun", "--kill-on-bad-exit=1", *srun, inner])
    elif launcher == "srun":
        inner = user if not is_text else f"bash -c {q(user)}"
        launch = " ".join(["srun", "--kill-on-bad-exit=1", *srun, inner])
    else:
        launch = user if (not is_text or wrapper is None) else f"bash -c {q(user)}"
    if wrapper:
        launch = f"exec {wrapper} {launch}"
    return launch, wrapper is not None


def _cpus(cpus: list[int]) -> str:
    try:
        from ..topology.model import format_cpulist

        return format_cpulist(cpus)
    except ImportError:
        return ",".join(map(str, cpus))


def _secs(t: str) -> int:
    from ..times import seconds

    return seconds(t)


def render(
    spec: JobSpec, settings, *, spec_name: str = "job", placement: tuple[list[str], str] | None = None
) -> Rendered:
    r = plan(spec, settings, spec_name=spec_name, placement=placement)
    extra = None
    if spec.template:
        t = spec.template
        if "/" in t:
            extra, tname = template_below_spec(spec, t)
        else:
            tname = t if t.endswith(".j2") else f"{t}.sbatch.j2"
    else:
        tname = TEMPLATES[r.template]
    r.template = tname
    script = render_template(settings, tname, r.context, extra_dir=extra, spec=spec)
    if spec.setup and SETUP_MARK not in script:
        raise spec.error(
            "setup",
            f"template {tname} does not place the setup lines (extend base.sbatch.j2, or keep its "
            "`user_setup` block): refused rather than run the command without them",
        )
    r.script = script.rstrip("\n") + "\n"
    return r
