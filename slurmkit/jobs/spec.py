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
    dependency: afterok:1234            # or [1234, 1235]: start when those jobs completed successfully
    gpu_type: h100                      # --gpus-per-node=h100:N; mem_per_gpu, constraint, exclude, nodelist,
    mail: {type: [END, FAIL]}           # comment: the sbatch options of the same names
    setup: [module load cuda/12.4, source .venv/bin/activate]   # before the command, outside any container

The schema is the records below (the site-config loader does the typing and the `file:line` errors); the
checks that need more than a type (a time format, a valid environment name, the signal lead inside the time
limit) are in `validate`, and report the line of the key they are about.
"""

from __future__ import annotations

import itertools
import typing
from typing import Literal


from ..times import TIME_RE, seconds as time_seconds  # noqa: F401 - TIME_RE: the spec's grammar
from ..errors import SpecError, UsageError
from ..record import Record, field, fields, is_record
from ..typedyaml import MAX_DEPTH, MAX_INT_DIGITS, MAX_NODES  # the one set of YAML bounds
from .validate import MAX_SWEEP, MEM_RE, NAME_RE, SBATCH_OPT_RE, UNLIMITED, validate  # noqa: F401 - the spec's grammar

SPEC_LIMIT = 16 * 1024 * 1024  # bytes: a job spec is a page of YAML; 16 MiB is far past any real one


class Checkpointing(Record):
    """Where the job's checkpoints become durable during the job (issue 29): `slurmkit run --durable`."""

    durable: str | None = None  # a path or s3://; each complete checkpoint is copied there as soon as it is saved


class Preemption(Record):
    """How a job survives preemption and its time limit: signal lead, requeues, the checkpoint signal."""

    signal_lead: int | None = None  # seconds before the time limit; default from the site config
    max_requeues: int | None = None  # default from the site config
    requeue: bool = True  # --requeue (preemptible); false -> --no-requeue
    # what `slurmkit run` sends the child to ask for a checkpoint; none: only the flag file $SLURMKIT_STOP_FILE
    checkpoint_signal: Literal["TERM", "INT", "USR1", "USR2", "HUP", "QUIT", "none"] = "TERM"
    grace: int | None = None  # seconds `slurmkit run` gives the child to checkpoint


class Container(Record):
    """The container a job's command runs in (image, mounts, working directory)."""

    image: str
    mounts: list[str] = field(default_factory=list)
    workdir: str | None = None


class Torchrun(Record):
    """torchrun's rendezvous port, processes per node and binary."""

    rdzv_port: int | None = None  # default: 20000 + job id % 20000 (two jobs sharing a node do not collide)
    nproc_per_node: int | None = None  # default: gpus_per_node
    bin: str = "torchrun"


class Mail(Record):
    """Mail from Slurm about the job: to `user` (default: the submitting user), on the events in `type`."""

    type: list[str] | str  # BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT_80, ... (sbatch --mail-type)
    user: str | None = None


class JobSpec(Record):
    """A validated job spec: what `slurmkit submit` renders into an sbatch script."""

    command: str | list[str] | None = None
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    gpus_per_node: int = 1
    gpu_type: str | None = None  # h100, a100_80gb, a MIG profile (1g.10gb): --gpus-per-node=TYPE:N
    tasks_per_node: int | None = None
    cpus_per_gpu: int | Literal["auto"] = "auto"
    mem: str | None = None
    mem_per_gpu: str | None = None  # --mem-per-gpu; not with mem
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
    dependency: str | list[str] | None = None  # "afterok:123:124", or job ids (afterok), or Job objects in Python
    constraint: str | None = None  # node features: h100&ib, [rack1|rack2]
    exclude: list[str] | str = field(default_factory=list)  # host lists: n3, n[5-8]
    nodelist: list[str] | str = field(default_factory=list)
    mail: Mail | None = None
    comment: str | None = None
    setup: list[str] | str = field(default_factory=list)  # shell lines before the command, outside any container
    sbatch: list[str] = field(default_factory=list)  # extra raw options, e.g. ["--exclusive"]
    placement: bool = True  # false: no --switches/--segment even where the site's submit.placement asks for them
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

    from .. import typedyaml

    node = typedyaml.compose(text, path)  # its bounds first: 200,000 env keys are refused at once
    if node is None:
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
    _check_typed_gpus(node, path, set_keys)
    lines: dict[str, int] = {}
    spec = typedyaml.convert(node, JobSpec, "", path, lines)
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


def _check_typed_gpus(root, path: str, set_keys) -> None:
    """`gpus_per_node: a100:4` (sbatch's own spelling): say which two keys it is, not only 'expected an integer'."""
    import yaml

    node = _mapping_get(root, "gpus_per_node")
    if isinstance(node, yaml.ScalarNode) and "gpus_per_node" not in set_keys:
        hint = typed_gpus_hint(node.value)
        if hint:
            raise UsageError(hint, path=path, line=node.start_mark.line + 1)


def typed_gpus_hint(value: str) -> str | None:
    import re

    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63}):([0-9]{1,4})", value.strip())
    if not m:
        return None
    return f"gpus_per_node: {value.strip()!r} is sbatch's spelling; write gpu_type: {m[1]} and gpus_per_node: {m[2]}"


def _apply_set(root, item: str) -> str:
    """Apply one `--set a.b=value` to the composed YAML tree; check the key and the value's type first."""
    import yaml

    from .. import typedyaml

    where = f"--set {item}"
    if "=" not in item:
        raise UsageError(f"{where}: expected KEY=VALUE (or KEY+=VALUE to add to a list)")
    key, value = item.split("=", 1)
    append = key.endswith("+")
    if append:
        key = key[:-1]
    parts = key.strip().split(".")
    tp: typing.Any = JobSpec
    node = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if is_record(tp):
            names = [f.name for f in fields(tp) if not f.metadata.get("internal")]
            if part not in names:
                import difflib  # only for a hint on an error: off the start-up path

                hint = difflib.get_close_matches(part, names, n=1)
                raise UsageError(
                    f"{where}: unknown key '{'.'.join(parts[: i + 1])}'"
                    + (f"; did you mean '{hint[0]}'?" if hint else "")
                )
            tp = typedyaml.field_types(tp)[part]
            if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
                inner = [a for a in typing.get_args(tp) if a is not type(None)]
                if len(inner) == 1 and is_record(inner[0]) and not last:
                    tp = inner[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            raise UsageError(f"{where}: '{'.'.join(parts[:i])}' has no sub-keys")
        if last and key.strip() == "gpus_per_node" and typed_gpus_hint(value):
            raise UsageError(f"--set {typed_gpus_hint(value)}")
        if last and append:
            _mapping_put(node, part, _appended(where, key, tp, _mapping_get(node, part), value))
        elif last:
            try:
                vnode = yaml.compose(value, Loader=typedyaml.loader())
            except yaml.YAMLError as e:
                if not _takes_str(tp):
                    why = getattr(e, "problem", None) or str(e).splitlines()[0]
                    raise UsageError(f"{where}: cannot parse the value as YAML: {why}") from None
                vnode = yaml.ScalarNode("tag:yaml.org,2002:str", value, _mark(), _mark())
            if vnode is None:
                vnode = yaml.ScalarNode("tag:yaml.org,2002:null", "null", _mark(), _mark())
            try:
                typedyaml.convert(vnode, tp, key, "--set", {})
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


def _appended(where: str, key: str, tp, old, value: str):
    """`--set key+=value`: the key's list (from the file, or empty) with the value added: one item, or each item of
    a YAML list (`exclude+=[n3, n4]`). An item that does not parse as YAML is the text as typed."""
    import types

    import yaml

    from .. import typedyaml

    alts = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    lists = [a for a in alts if typing.get_origin(a) is list]
    if not lists:
        raise UsageError(f"{where}: '{key}' is not a list; += adds to a list key (sbatch, setup, exclude, ...)")
    try:
        vnode = yaml.compose(value, Loader=typedyaml.loader())
    except yaml.YAMLError:
        vnode = None
    if vnode is None or isinstance(vnode, yaml.MappingNode):
        vnode = yaml.ScalarNode("tag:yaml.org,2002:str", value, _mark(), _mark())
    new = list(vnode.value) if isinstance(vnode, yaml.SequenceNode) else [vnode]
    if isinstance(old, yaml.SequenceNode):
        items = list(old.value)
    elif old is None or (isinstance(old, yaml.ScalarNode) and old.tag.endswith(":null")):
        items = []
    elif isinstance(old, yaml.ScalarNode):
        items = [old]  # `exclude: n3` in the file, `exclude+=n4` here: [n3, n4]
    else:
        raise UsageError(f"{where}: '{key}' in the spec is a mapping, not a list")
    seq = yaml.SequenceNode("tag:yaml.org,2002:seq", items + new, _mark(), _mark())
    try:
        typedyaml.convert(seq, lists[0], key, "--set", {})
    except UsageError as e:
        msg = str(e).split(": ", 1)[1] if str(e).startswith("--set") else str(e)
        raise UsageError(f"{where}: {msg}") from None
    return seq


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
