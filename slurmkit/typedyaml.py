"""Typed YAML: text in, a record (slurmkit/record.py) out, with errors that name the file, the line and the key.

The one YAML loader of slurmkit, shared by the site config (config.py), the job spec (jobs/spec.py) and the
checkpoint job files (checkpoint/jobfile.py): one parser (libyaml's where PyYAML has it), one set of bounds and one
set of messages. Bounds, each named in its error: `prescan` counts while libyaml reads, before any tree is built
(at most MAX_VALUES values written out, MAX_ITEMS keys or items in one mapping or list, MAX_DEPTH levels of
nesting); `convert` visits at most MAX_NODES nodes with aliases counted at each use (an anchor bomb) and integers
of at most MAX_INT_DIGITS digits. Callers bound the text's size before (bounded.py).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from .errors import RangeError, UsageError
from .record import Record, fields, is_record

MAX_NODES = 100_000  # YAML nodes visited per document, aliases counted at each use
MAX_VALUES = 100_000  # YAML values written out (the prescan's count, before aliases)
MAX_DEPTH = 64  # levels of nesting
MAX_INT_DIGITS = 30  # digits of an integer setting (every integer setting's range fits in far fewer)
MAX_ITEMS = 10_000  # keys of one mapping, items of one list (a job's env is dozens; 200,000 took 10 s and 220 MB)


def loader():
    """libyaml's safe loader where PyYAML was built with it (same nodes and marks, less time), else PyYAML's."""
    import yaml  # not at module level: most commands never read YAML

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def compose(text: str, path: str, *, max_values: int = MAX_VALUES, max_items: int = MAX_ITEMS):
    """The YAML text's node tree (None for an empty document), after the prescan's bounds; a syntax error is a
    UsageError with the file and line."""
    import yaml

    try:
        prescan(text, path, max_nodes=max_values, max_items=max_items)
        node = yaml.compose(text, Loader=loader())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise UsageError(f"YAML syntax error: {e.problem or e.context}", path=path, line=line) from None
    except yaml.YAMLError as e:
        raise UsageError(f"YAML error: {e}", path=path) from None
    except RecursionError:  # the prescan bounds the depth first: kept for a loader without it
        raise UsageError(f"nested too deeply (the limit is {MAX_DEPTH} levels)", path=path) from None
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
        return None
    return node


def parse_yaml(text: str, schema: type[Record], path: str, *, top: str = "") -> Any:
    """Parse YAML text into an instance of the record `schema`, with errors that name path:line and key."""
    if not text.strip(" \n"):  # no document at all (/dev/null, an empty file): the defaults, without PyYAML
        obj: Any = schema()
        if "source" in schema.__fields__:
            obj.source, obj.lines = path, {}
        return obj
    node = compose(text, path)
    lines: dict[str, int] = {}
    obj = schema() if node is None else convert(node, schema, top, path, lines)
    if "source" in schema.__fields__:
        obj.source = path
        obj.lines = lines
    return obj


def prescan(text: str, path: str, *, max_nodes: int = MAX_VALUES, max_items: int = MAX_ITEMS) -> None:
    """Refuse a YAML document too big to be a config or a spec while libyaml reads it, before any tree is built:
    more than `max_nodes` values written out, or a mapping or list of more than `max_items` (composing 200,000
    `env` keys cost 10 s and 220 MB, then was refused as an alias bomb), or nesting deeper than MAX_DEPTH levels
    (before a loader recurses into it). The error names the key and the line. Alias bombs (few nodes, billions
    once expanded) are `convert`'s budget's job."""
    import yaml

    try:
        _prescan(yaml.parse(text, Loader=loader()), path, max_nodes, max_items)
    except yaml.YAMLError as e:
        if "nesting depth" in str(e):  # libyaml's own bound (1000 levels), met while it reads ahead
            mark = getattr(e, "problem_mark", None)
            line = mark.line + 1 if mark else None
            raise UsageError(f"nested too deeply (the limit is {MAX_DEPTH} levels)", path=path, line=line) from None
        # any other syntax error: the loader that follows reports it in its own words


def _prescan(events, path: str, max_nodes: int, max_items: int) -> None:
    import yaml

    nodes = 0
    # one frame per open collection: [is a mapping, items so far, its key path, next node is a key, last key]
    stack: list[list] = []
    for ev in events:
        if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            stack.pop()
            continue
        if not isinstance(ev, yaml.NodeEvent):
            continue
        nodes += 1
        line = ev.start_mark.line + 1 if ev.start_mark else None
        if nodes > max_nodes:
            raise UsageError(f"more than {max_nodes} YAML values (written out, not aliases)", path=path, line=line)
        name = ""
        if stack:
            top = stack[-1]
            where = top[2] or "the top level"
            if top[0] and top[3]:  # a key of the open mapping
                top[1] += 1
                top[3], top[4] = False, ev.value if isinstance(ev, yaml.ScalarEvent) else "?"
                if top[1] > max_items:
                    raise UsageError(f"{where}: more than {max_items} keys", path=path, line=line)
            elif top[0]:  # its value
                top[3] = True
                name = f"{top[2]}.{top[4]}" if top[2] else str(top[4])
            else:
                top[1] += 1
                if top[1] > max_items:
                    raise UsageError(f"{where}: more than {max_items} items", path=path, line=line)
                name = f"{top[2]}[{top[1] - 1}]"
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) >= MAX_DEPTH:
                where = f"{name.split('[')[0][:80]}: " if name else ""  # the key, not a hundred [0]s
                raise UsageError(f"{where}nested too deeply (the limit is {MAX_DEPTH} levels)", path=path, line=line)
            stack.append([isinstance(ev, yaml.MappingStartEvent), 0, name, True, None])


class _Budget:
    """Nodes left to visit in one document: an alias is expanded at each use, so a few hundred bytes of
    anchors can stand for billions of nodes; past MAX_NODES the document is refused."""

    def __init__(self) -> None:
        self.left = MAX_NODES

    def take(self, node, path: str) -> None:
        self.left -= 1
        if self.left < 0:
            raise UsageError(
                f"too many YAML nodes (the limit is {MAX_NODES}, aliases counted at each use)",
                path=path,
                line=_line(node),
            )


def _line(node) -> int:
    return node.start_mark.line + 1


def _kind(node) -> str:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    tag = node.tag.rsplit(":", 1)[-1]
    return {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean", "null": "null"}.get(
        tag, tag
    ) + f" ({node.value!r})"


def _typename(tp) -> str:
    origin = typing.get_origin(tp)
    if tp is str:
        return "a string"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return "a list"
    if origin is dict or is_record(tp):
        return "a mapping"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_typename(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return str(tp)


_HINT_CACHE: dict[type, dict[str, Any]] = {}


def field_types(cls) -> dict[str, Any]:
    """The class's resolved field types, computed once per class (get_type_hints evaluates every annotation's
    string again on each call: most of a spec's load time in a process that submits many)."""
    found = _HINT_CACHE.get(cls)
    if found is None:
        # each class's annotations in its own module's names, and the typing names that a settings module
        # imports only for the type checker
        found = _HINT_CACHE[cls] = typing.get_type_hints(cls, None, {"Any": Any, "Literal": Literal})
    return found


def _key_text(knode, path: str) -> str:
    """A mapping key as text: only a plain scalar (a list or mapping as a key, or an alias bomb, is refused)."""
    import yaml

    if not isinstance(knode, yaml.ScalarNode):
        raise UsageError(f"a key must be a plain string, got {_kind(knode)}", path=path, line=_line(knode))
    return str(knode.value)


def convert(node, tp, key: str, path: str, lines: dict[str, int], *, budget: _Budget | None = None, depth: int = 0):
    import yaml

    budget = budget or _Budget()
    budget.take(node, path)
    if depth > MAX_DEPTH:
        raise UsageError(
            f"{key or 'the top level'}: nested too deeply (the limit is {MAX_DEPTH} levels)",
            path=path,
            line=_line(node),
        )
    kw: dict[str, Any] = {"budget": budget, "depth": depth + 1}
    if key:
        lines.setdefault(key, _line(node))
    label = key or "the top level"
    origin = typing.get_origin(tp)
    if tp is Any:
        try:
            return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
        except RecursionError:
            raise UsageError(f"{label}: nested too deeply", path=path, line=_line(node)) from None
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(node, a, key, path, lines, budget=budget, depth=depth)
            except UsageError as e:
                errors.append(e)
        if len(errors) == 1 and not (isinstance(node, yaml.ScalarNode) and "expected" in str(errors[0])):
            raise errors[0]  # one alternative besides null, and the value has its shape: say what is wrong inside
        raise UsageError(f"{label}: expected {_typename(tp)}, got {_kind(node)}", path=path, line=_line(node))
    if isinstance(tp, type) and is_record(tp):
        if not isinstance(node, yaml.MappingNode):
            raise UsageError(f"{label}: expected a mapping, got {_kind(node)}", path=path, line=_line(node))
        hints = field_types(tp)
        names = [f.name for f in fields(tp) if not f.metadata.get("internal")]
        kwargs = {}
        for knode, vnode in node.value:
            k = _key_text(knode, path)
            sub = f"{key}.{k}" if key else k
            if k not in names:
                import difflib  # only for a hint on an error: off the start-up path

                hint = difflib.get_close_matches(k, names, n=1)
                msg = f"unknown key '{sub}'"
                msg += f"; did you mean '{hint[0]}'?" if hint else f" (expected one of: {', '.join(names)})"
                raise UsageError(msg, path=path, line=_line(knode))
            if k in kwargs:
                raise UsageError(f"duplicate key '{sub}'", path=path, line=_line(knode))
            lines[sub] = _line(knode)
            kwargs[k] = convert(vnode, hints[k], sub, path, lines, **kw)
        missing = [f.name for f in fields(tp) if f.name not in kwargs and not f.metadata.get("internal") and f.required]
        if missing:
            sub = f"{key}.{missing[0]}" if key else missing[0]
            raise UsageError(f"{label}: missing key '{sub}'", path=path, line=_line(node))
        try:
            return tp(**kwargs)
        except RangeError as e:  # a number outside its valid range: the key's own line
            sub = f"{key}.{e.key}" if key else e.key
            line = lines.get(sub) or lines.get(sub.split("[")[0]) or _line(node)
            raise UsageError(f"{sub}: {e.detail}", path=path, line=line) from None
        except (TypeError, ValueError) as e:  # a __post_init__ check
            raise UsageError(f"{label}: {e}", path=path, line=_line(node)) from None
    if origin in (list, tuple):
        (item,) = typing.get_args(tp)[:1] or (Any,)
        if not isinstance(node, yaml.SequenceNode):
            raise UsageError(f"{label}: expected a list, got {_kind(node)}", path=path, line=_line(node))
        return [convert(n, item, f"{key}[{i}]", path, lines, **kw) for i, n in enumerate(node.value)]
    if origin is dict:
        _, vt = typing.get_args(tp)
        if not isinstance(node, yaml.MappingNode):
            raise UsageError(f"{label}: expected a mapping, got {_kind(node)}", path=path, line=_line(node))
        out = {}
        for knode, vnode in node.value:
            k = _key_text(knode, path)
            if k in out:
                raise UsageError(
                    f"duplicate key '{key}.{k}'" if key else f"duplicate key '{k}'", path=path, line=_line(knode)
                )
            out[k] = convert(vnode, vt, f"{key}.{k}" if key else k, path, lines, **kw)
        return out
    if not isinstance(node, yaml.ScalarNode):
        raise UsageError(f"{label}: expected {_typename(tp)}, got {_kind(node)}", path=path, line=_line(node))
    tag = node.tag.rsplit(":", 1)[-1]
    if origin is Literal:
        allowed = typing.get_args(tp)
        if node.value in [str(a) for a in allowed]:
            return next(a for a in allowed if str(a) == node.value)
        import difflib  # only for a hint on an error: off the start-up path

        hint = difflib.get_close_matches(node.value, [str(a) for a in allowed], n=1)
        msg = f"{label}: expected {_typename(tp)}, got {node.value!r}"
        raise UsageError(msg + (f"; did you mean {hint[0]!r}?" if hint else ""), path=path, line=_line(node))
    if tp is str:
        if tag == "null":
            raise UsageError(f"{label}: expected a string, got null", path=path, line=_line(node))
        return node.value  # the text as written: `cuda: 12.10` stays "12.10", not the float 12.1
    if tp is bool:
        if tag != "bool":
            raise UsageError(f"{label}: expected true or false, got {_kind(node)}", path=path, line=_line(node))
        return node.value.lower() in ("true", "yes", "on", "y")
    if tp is int:
        if tag != "int":
            raise UsageError(f"{label}: expected an integer, got {_kind(node)}", path=path, line=_line(node))
        if len(node.value) > MAX_INT_DIGITS:
            raise UsageError(
                f"{label}: integer too long ({len(node.value)} characters; the limit is {MAX_INT_DIGITS} digits)",
                path=path,
                line=_line(node),
            )
        return yaml.constructor.SafeConstructor().construct_yaml_int(node)
    if tp is float:
        if tag not in ("int", "float"):
            raise UsageError(f"{label}: expected a number, got {_kind(node)}", path=path, line=_line(node))
        if tag == "int" and len(node.value) > MAX_INT_DIGITS:
            raise UsageError(
                f"{label}: number too long ({len(node.value)} characters; the limit is {MAX_INT_DIGITS} digits)",
                path=path,
                line=_line(node),
            )
        return float(yaml.constructor.SafeConstructor().construct_object(node))
    raise TypeError(f"config schema: unsupported type {tp!r} for {label}")
