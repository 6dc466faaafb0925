"""One path from a job spec to an sbatch script checked against the cluster, shared by the CLI (`slurmkit render`,
`slurmkit submit`) and the Python API (`slurmkit.render()`, `slurmkit.submit()`): the same validation, template,
binding and cluster check, whichever door the spec comes in by.

    spec, r = build("job.yaml", settings, ["nodes=2"], nodes=cluster_nodes)   # r.script: the sbatch script
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Union

from ..errors import SpecError
from .spec import JobSpec

# a spec file's path, or the spec itself as a mapping (the keys of a spec file)
SpecSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]
DICT_SOURCE = "<dict>"  # what errors about a mapping spec name as its file


# a surrogate-pair escape, not preceded by an odd number of backslashes (those are an escaped `\\u...` text)
_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def yaml_text(value: Any) -> str:
    """Plain data (None, bool, int, float, str, list, tuple, dict with str keys) as YAML text the spec loader reads
    back to the same value: JSON, which is YAML, but for two places where PyYAML (YAML 1.1) reads JSON otherwise:
    a float always has a `.` (`1e+16` would be a string), and a character past U+FFFF is YAML's \\UXXXXXXXX (JSON's
    surrogate-pair escape would be two lone surrogates). A slurmkit.Job is its id (for `dependency`).
    TypeError/ValueError for anything else."""
    if value is None or isinstance(value, (bool, int)):
        return json.dumps(value)
    if isinstance(value, float):
        text = json.dumps(value, allow_nan=False)
        mant, e, exp = text.partition("e")
        return f"{mant}.0{e}{exp}" if e and "." not in mant else text
    if isinstance(value, str):
        return _PAIR.sub(
            lambda m: (
                m.group(1)
                + "\\U%08x" % (0x10000 + ((int(m.group(2), 16) - 0xD800) << 10) + int(m.group(3), 16) - 0xDC00)
            ),
            json.dumps(value),
        )
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        for k in value:
            if not isinstance(k, str):
                raise TypeError(f"a mapping key must be a string, got {type(k).__name__} {k!r}")
        return "{" + ", ".join(f"{yaml_text(k)}: {yaml_text(v)}" for k, v in value.items()) + "}"
    from .handle import Job

    if isinstance(value, Job):  # dependency=[job1, job2] from Python: the job's id ("123", or "123_4")
        return json.dumps(value.id)
    raise TypeError(f"{type(value).__name__} {value!r} is not plain data")


def load_spec(source: SpecSource, sets: list[str] | tuple[str, ...] = ()) -> JobSpec:
    """A validated JobSpec from a file path or a mapping; `sets` are `key=value` overrides (dotted keys, YAML
    values), as `--set` gives them. A mapping has no lines: its errors name `<dict>` and the key."""
    from . import spec as specmod

    if isinstance(source, Mapping):
        try:  # JSON is YAML: the mapping goes through the same loader and checks as a file
            text = yaml_text(dict(source))
        except (TypeError, ValueError) as e:
            raise SpecError(
                f"the spec mapping is not plain data (str, int, float, bool, None, list, dict): {e}", path=DICT_SOURCE
            ) from None
        try:
            spec = specmod.loads(text, DICT_SOURCE, sets)
        except SpecError as e:
            if e.path != DICT_SOURCE:
                raise
            raise SpecError(e.message, path=DICT_SOURCE) from None  # line 1 of our JSON means nothing to a user
        spec.lines = {}
        return spec
    return specmod.load(os.fspath(source), sets)


def spec_name(source: SpecSource) -> str:
    """The name a job gets when its spec sets none (the file name, without .yaml), and its script's comment."""
    return "job" if isinstance(source, Mapping) else os.path.basename(os.fspath(source))


def build(
    source: SpecSource,
    settings,
    sets: list[str] | tuple[str, ...] = (),
    *,
    nodes: Callable[[], list] | None = None,
    say: Callable[[str], None] | None = None,
    topology: Callable[[], str] | None = None,
):
    """Load, render and (when `nodes` is given: a function returning the cluster's node records) check a spec
    against the cluster. `topology`: a function returning `scontrol show topology`'s text, asked only when the
    site's submit.placement is on and the job could use it (jobs/placing.py). Returns (JobSpec, render.Rendered);
    raises SpecError/UsageError (exit 2)."""
    from . import render
    from .placing import place

    spec = load_spec(source, sets)
    placed = place(spec, settings, topology)
    r = render.render(spec, settings, spec_name=spec_name(source), placement=placed)
    if say:
        say(f"template {r.template}")
        for n in r.notes:
            say(n)
    if nodes is not None:
        from .check import check_request

        check_request(spec, r.partition, r.cpus_per_node, nodes())
        if say:
            say(f"the cluster has room for the request ({spec.nodes} node(s) x {spec.gpus_per_node} GPU(s))")
    return spec, r


def background(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run fn in a thread (it waits on a subprocess, so it overlaps with our own work); the returned function
    joins and returns its result or raises its exception."""
    import threading

    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def result():
        t.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result
