"""The job spec: YAML in, a validated JobSpec out, with errors that name the file, the line and the key.

    name: finetune
    partition: gpu
    nodes: 1
    gpus_per_node: 1
    cpus_per_gpu: auto          # an integer, or `auto`: from the partition's topology profile
    mem: 64G
    time: "04:00:00"
    launcher: none              # none | srun | torchrun | accelerate | deepspeed
    command: python train.py --lr $LR     # a string (shell text) or a list (argv, each item quoted)
    env: {HF_HOME: /scratch/hf}
    checkpoint_dir: /scratch/ckpt         # configured -> the command runs under `slurmkit run`
    preemption: {signal_lead: 120, max_requeues: 3}
    sweep: {lr: [1e-4, 3e-4], seed: [1, 2, 3]}   # a grid -> a job array; each task gets its own values in env

The schema is the dataclasses below (the site-config loader does the typing and the `file:line` errors); the
checks that need more than a type (a time format, a valid environment name, the signal lead inside the time
limit) are in `validate`, and report the line of the key they are about.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import typing
from dataclasses import dataclass, field
from typing import Literal

from ..checkpoint.paths import Checkpointing

from ..times import TIME_RE, seconds as time_seconds  # noqa: F401 - TIME_RE: the spec's grammar
from ..errors import SpecError, UsageError

# Validation patterns match the whole value (`\Z`, not `$`, which lets a trailing newline through) and ASCII
# digits only (`\d` is any Unicode digit: "٣:٠٠:٠٠" is not a Slurm time). Numbers have a bounded length.
NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
MEM_RE = re.compile(r"\A[0-9]{1,15}[KMGTkmgt]?\Z")
UNLIMITED = ("infinite", "unlimited")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
# an sbatch option name: --long-name or -x; its value, if any, after `=`
SBATCH_OPT_RE = re.compile(r"\A(?:--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z])\Z")
MAX_SWEEP = 10000
SPEC_LIMIT = 16 * 1024 * 1024  # bytes: a job spec is a page of YAML; 16 MiB is far past any real one
MAX_NODES = 100_000  # YAML nodes after aliases are expanded (anchor bombs), and nesting depth
MAX_DEPTH = 64
MAX_INT_DIGITS = 30


@dataclass
class Preemption:
    """How a job survives preemption and its time limit: signal lead, requeues, the checkpoint signal."""

    signal_lead: int | None = None  # seconds before the time limit; default from the site config
    max_requeues: int | None = None  # default from the site config
    requeue: bool = True  # --requeue (preemptible); false -> --no-requeue
    # what `slurmkit run` sends the child to ask for a checkpoint; none: only the flag file $SLURMKIT_STOP_FILE
    checkpoint_signal: Literal["TERM", "INT", "USR1", "USR2", "HUP", "QUIT", "none"] = "TERM"
    grace: int | None = None  # seconds `slurmkit run` gives the child to checkpoint


@dataclass
class Container:
    """The container a job's command runs in (image, mounts, working directory)."""

    image: str
    mounts: list[str] = field(default_factory=list)
    workdir: str | None = None


@dataclass
class Torchrun:
    """torchrun's rendezvous port, processes per node and binary."""

    rdzv_port: int | None = None  # default: 20000 + job id % 20000 (two jobs sharing a node do not collide)
    nproc_per_node: int | None = None  # default: gpus_per_node
    bin: str = "torchrun"


@dataclass
class JobSpec:
    """A validated job spec: what `slurmkit submit` renders into an sbatch script."""

    command: str | list[str] | None = None
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    gpus_per_node: int = 1
    tasks_per_node: int | None = None
    cpus_per_gpu: int | Literal["auto"] = "auto"
    mem: str | None = None
    time: str | None = None
    launcher: Literal["none", "srun", "torchrun", "accelerate", "deepspeed"] = "none"
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    output: str | None = None
    container: Container | None = None
    checkpoint_dir: str | None = None
    checkpoint: Checkpointing = field(default_factory=Checkpointing)
    preemption: Preemption = field(default_factory=Preemption)
    torchrun: Torchrun = field(default_factory=Torchrun)
    sweep: dict[str, list[str]] = field(default_factory=dict)
    sweep_parallel: int | None = None  # at most this many array tasks at once (--array=0-N%K)
    sbatch: list[str] = field(default_factory=list)  # extra raw options, e.g. ["--exclusive", "--constraint=h100"]
    template: str | None = None
    source: str | None = field(default=None, metadata={"internal": True})
    lines: dict[str, int] = field(default_factory=dict, metadata={"internal": True})
    set_keys: list[str] = field(default_factory=list, metadata={"internal": True})  # given with --set

    def error(self, key: str, msg: str) -> SpecError:
        """A SpecError about `key`: `file:line: key: msg`, or `--set key: msg` when --set gave the value."""
        top = key.split(".")[0].split("[")[0]
        if key in self.set_keys or top in self.set_keys:
            return SpecError(f"--set {key}: {msg}")
        return SpecError(f"{key}: {msg}", path=self.source, line=self.lines.get(key) or self.lines.get(top))

    def sweep_grid(self) -> list[dict[str, str]]:
        """The sweep as one dict per array task, in a stable order (the cartesian product, first key slowest)."""
        if not self.sweep:
            return []
        keys = list(self.sweep)
        return [dict(zip(keys, combo)) for combo in itertools.product(*(self.sweep[k] for k in keys))]


# --- loading -----------------------------------------------------------------------------------------------------


def load(path: str, sets: list[str] | tuple[str, ...] = ()) -> JobSpec:
    """Read, parse and validate the spec file at `path`; every problem with it is a SpecError (file:line)."""
    from ..bounded import read_bytes

    with _as_spec_error():
        data = read_bytes(path, limit=SPEC_LIMIT, what="job spec")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"cannot read job spec: not UTF-8 ({e.reason} at byte {e.start})", path=path) from None
    return loads(text, path, sets)


def loads(text: str, path: str = "<spec>", sets: list[str] | tuple[str, ...] = ()) -> JobSpec:
    """Parse and validate a spec; each `key=value` in `sets` (dotted keys, YAML values) overrides the file.
    Every problem is a SpecError (a UsageError, exit 2) naming the file and line, or the `--set` item."""
    with _as_spec_error():
        return _loads(text, path, sets)


class _as_spec_error:
    """Re-raise a plain UsageError (the typed loader's, the bounded reader's) as the SpecError it is here."""

    def __enter__(self):
        return self

    def __exit__(self, tp, e, tb):
        if isinstance(e, UsageError) and not isinstance(e, SpecError):
            raise SpecError(getattr(e, "message", str(e)), path=e.path, line=e.line) from None
        return False


def _loads(text: str, path: str, sets) -> JobSpec:
    import yaml

    from .. import config

    try:
        config.prescan(text, path, max_nodes=MAX_NODES)  # 200,000 env keys: refused at once
        # libyaml's parser where PyYAML has it: same nodes and marks, less start-up
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise UsageError("YAML nested too deeply", path=path) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise UsageError(
            f"YAML syntax error: {e.problem or e.context}", path=path, line=mark.line + 1 if mark else None
        ) from None
    except yaml.YAMLError as e:
        raise UsageError(f"YAML error: {e}", path=path) from None
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
        node = yaml.MappingNode("tag:yaml.org,2002:map", [], _mark(), _mark())
    if not isinstance(node, yaml.MappingNode):
        raise UsageError(
            "a job spec is a mapping of keys (name, command, gpus_per_node, ...)",
            path=path,
            line=node.start_mark.line + 1,
        )
    check_tree(node, path)
    set_keys = set()
    for item in sets:
        set_keys.add(_apply_set(node, item))
    _check_command(node, path, set_keys)
    lines: dict[str, int] = {}
    spec = config._convert(node, JobSpec, "", path, lines)
    spec.source = path
    spec.lines = {k: v for k, v in lines.items() if k.split(".")[0].split("[")[0] not in set_keys and k not in set_keys}
    spec.set_keys = sorted(set_keys)
    validate(spec, set_keys)
    return spec


def check_tree(root, path: str, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> None:
    """Refuse what would cost far more than its size before anything walks it: a tree of more than `max_nodes`
    nodes once aliases are expanded (an anchor bomb: nine lines of YAML that stand for a billion), nesting deeper
    than `max_depth`, recursive aliases, a mapping key that is not a plain scalar, an integer with more than
    MAX_INT_DIGITS digits. Iterative, and each node's expanded size is computed once (linear in the text)."""
    import yaml

    size: dict[int, int] = {}
    in_progress: set[int] = set()
    stack = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        nid = id(node)
        if done:
            kids = _children(node)
            size[nid] = 1 + sum(size[id(k)] for k in kids)
            in_progress.discard(nid)
            if size[nid] > max_nodes:
                raise UsageError(
                    f"the YAML stands for more than {max_nodes} values once its aliases (*name) are expanded",
                    path=path,
                    line=node.start_mark.line + 1,
                )
            continue
        if nid in size:
            continue
        if nid in in_progress:
            raise UsageError("recursive YAML alias", path=path, line=node.start_mark.line + 1)
        if depth > max_depth:
            raise UsageError(f"YAML nested deeper than {max_depth} levels", path=path, line=node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    raise UsageError(
                        "a mapping key must be a plain name, not a list or a mapping",
                        path=path,
                        line=k.start_mark.line + 1,
                    )
        elif (
            isinstance(node, yaml.ScalarNode)
            and node.tag.endswith(":int")
            and len(node.value.lstrip("+-")) > MAX_INT_DIGITS
        ):
            raise UsageError(
                f"a number with {len(node.value)} digits (at most {MAX_INT_DIGITS})",
                path=path,
                line=node.start_mark.line + 1,
            )
        in_progress.add(nid)
        stack.append((node, depth, True))
        for k in _children(node):
            if id(k) in in_progress:
                raise UsageError("recursive YAML alias", path=path, line=k.start_mark.line + 1)
            stack.append((k, depth + 1, False))


def _children(node) -> list:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_command(root, path: str, set_keys) -> None:
    """`command: [python, x, null]`: name the item that is not a string (the typed loader only says 'a list')."""
    import yaml

    node = _mapping_get(root, "command")
    if not isinstance(node, yaml.SequenceNode):
        return
    for i, item in enumerate(node.value):
        if isinstance(item, yaml.ScalarNode) and not item.tag.endswith(":null"):
            continue
        what = (
            "null"
            if isinstance(item, yaml.ScalarNode)
            else "a list"
            if isinstance(item, yaml.SequenceNode)
            else "a mapping"
        )
        msg = f"command[{i}]: expected a string (each list item is one argument), got {what}"
        if "command" in set_keys:
            raise UsageError(f"--set {msg}")
        raise UsageError(msg, path=path, line=item.start_mark.line + 1)


def _apply_set(root, item: str) -> str:
    """Apply one `--set a.b=value` to the composed YAML tree; check the key and the value's type first."""
    import yaml

    from .. import config

    where = f"--set {item}"
    if "=" not in item:
        raise UsageError(f"{where}: expected KEY=VALUE")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    tp: typing.Any = JobSpec
    node = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if dataclasses.is_dataclass(tp):
            names = [f.name for f in dataclasses.fields(tp) if not f.metadata.get("internal")]
            if part not in names:
                import difflib  # only for a hint on an error: off the start-up path

                hint = difflib.get_close_matches(part, names, n=1)
                raise UsageError(
                    f"{where}: unknown key '{'.'.join(parts[: i + 1])}'"
                    + (f"; did you mean '{hint[0]}'?" if hint else "")
                )
            tp = config._hints(tp)[part]
            if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
                inner = [a for a in typing.get_args(tp) if a is not type(None)]
                if len(inner) == 1 and dataclasses.is_dataclass(inner[0]) and not last:
                    tp = inner[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            raise UsageError(f"{where}: '{'.'.join(parts[:i])}' has no sub-keys")
        if last:
            try:
                vnode = yaml.compose(value, Loader=yaml.SafeLoader)
            except yaml.YAMLError as e:
                if not _takes_str(tp):
                    why = getattr(e, "problem", None) or str(e).splitlines()[0]
                    raise UsageError(f"{where}: cannot parse the value as YAML: {why}") from None
                vnode = yaml.ScalarNode("tag:yaml.org,2002:str", value, _mark(), _mark())
            if vnode is None:
                vnode = yaml.ScalarNode("tag:yaml.org,2002:null", "null", _mark(), _mark())
            try:
                config._convert(vnode, tp, key, "--set", {})
            except UsageError as e:
                if not _takes_str(tp):
                    msg = str(e).split(": ", 1)[1] if str(e).startswith("--set") else str(e)
                    raise UsageError(f"{where}: {msg}") from None
                # not valid YAML for this key, but the key takes a string: the text as typed
                # (`--set command=echo "a: b"` is a command, not a mapping)
                vnode = yaml.ScalarNode("tag:yaml.org,2002:str", value, _mark(), _mark())
            _mapping_put(node, part, vnode)
        else:
            child = _mapping_get(node, part)
            if child is None or not isinstance(child, yaml.MappingNode):
                child = yaml.MappingNode("tag:yaml.org,2002:map", [], _mark(), _mark())
                _mapping_put(node, part, child)
            node = child
    return key.strip()


def _takes_str(tp) -> bool:
    import types

    return tp is str or (typing.get_origin(tp) in (typing.Union, types.UnionType) and str in typing.get_args(tp))


def _mark():
    import yaml

    return yaml.Mark("--set", 0, 0, 0, None, None)


def _mapping_get(node, key):
    for k, v in node.value:
        if k.value == key:
            return v
    return None


def _mapping_put(node, key, vnode):
    import yaml

    for i, (k, _) in enumerate(node.value):
        if k.value == key:
            node.value[i] = (k, vnode)
            return
    node.value.append((yaml.ScalarNode("tag:yaml.org,2002:str", key, _mark(), _mark()), vnode))


# --- checks beyond types -----------------------------------------------------------------------------------------


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
