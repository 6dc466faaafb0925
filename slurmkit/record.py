"""Records: slurmkit's one kind of typed record class: the ones every hook makes on every job (the settings
sections, a check's result, a drain's action, a kernel-log event), the schemas typed YAML loads (the site config,
the job spec), and every other record of the package.

A Record's fields are its annotated class attributes, in order, each with a default, a `field(default_factory=...)`
or neither (required). `__init__`, `__repr__` and `__eq__` are one generic method each on the base class, and
`__post_init__` runs after `__init__` as in a dataclass. In the class statement, `frozen=True` refuses assignment
after `__init__`, and `kw_only=False` lets `__init__` take the fields in order as well as by name (keyword-only by
default). Type checkers read a Record as a dataclass (`dataclass_transform`).

Why not `dataclasses`: the decorator writes and compiles three methods for every class it makes (about 0.3 ms
each class on Python 3.11) and imports `inspect` (about 8 ms more), and the hooks make about 45 such classes
before their first check runs, on every node, for every job. A Record costs a dictionary of its fields.
slurmkit defines no dataclass: every record in it is a Record.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, ClassVar, get_origin

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the decorator only tells a type checker what the class is

    def dataclass_transform(**_kw: Any) -> Any:
        return lambda cls: cls


if TYPE_CHECKING:
    from collections.abc import Iterator


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """One field of a Record: its name, its default (or a factory of defaults) and free-form metadata."""

    __slots__ = ("name", "default", "default_factory", "metadata", "repr", "compare")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        metadata: Any = None,
        repr: bool = True,
        compare: bool = True,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field takes a default or a default_factory, not both")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.repr = repr  # shown by __repr__
        self.compare = compare  # compared by __eq__ (and hashed, when frozen)

    @property
    def required(self) -> bool:
        return self.default is MISSING and self.default_factory is MISSING

    def __repr__(self) -> str:
        return f"Field({self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    metadata: dict[str, Any] | None = None,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A field with a factory of defaults (`default_factory=list`), metadata, or left out of repr or comparison;
    as `dataclasses.field`."""
    return Field(default, default_factory, metadata, repr, compare)


def _own_annotations(cls: type) -> dict[str, Any]:
    """The annotations a class statement wrote itself, unevaluated where it can: strings under `from __future__
    import annotations` (every slurmkit module), else (Python 3.14's deferred annotations, PEP 649, in a module
    without that import) each name resolved where it is defined and a forward reference where it is not yet."""
    own = cls.__dict__.get("__annotations__")
    if own is not None:
        return own
    if sys.version_info >= (3, 14):
        if "__annotate_func__" in cls.__dict__ or "__annotate__" in cls.__dict__:
            # only a class from a module without the __future__ import comes here, never the hooks' own records:
            # annotationlib imports ast, which the hook path does not pay for
            import annotationlib

            return annotationlib.get_annotations(cls, format=annotationlib.Format.FORWARDREF)
    return {}


def _is_classvar(annotation: object) -> bool:
    """Whether a class annotation declares a class variable, not a field (a string under `from __future__ import
    annotations`, a forward reference's text, else the typing object)."""
    annotation = getattr(annotation, "__forward_arg__", annotation)
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))
    return annotation is ClassVar or get_origin(annotation) is ClassVar


@dataclass_transform(kw_only_default=True, field_specifiers=(field, Field))
class Record:
    """Base of every record: a subclass's annotated attributes are its fields (see the module's docstring)."""

    __fields__: ClassVar[dict[str, Field]] = {}
    __frozen__: ClassVar[bool] = False
    __kw_only__: ClassVar[bool] = True

    def __init_subclass__(cls, *, frozen: bool | None = None, kw_only: bool | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        fields = dict(cls.__fields__)  # the base classes' fields first, as in a dataclass
        for name, annotation in _own_annotations(cls).items():
            if _is_classvar(annotation):
                continue
            value = cls.__dict__.get(name, MISSING)
            f = value if isinstance(value, Field) else Field(default=value)
            f.name = name
            if f.default is not MISSING and f.default.__class__ in (list, dict, set):
                raise TypeError(f"{cls.__name__}.{name}: a mutable default; use field(default_factory=...)")
            if isinstance(value, Field):  # the class attribute is the default, as in a dataclass
                if f.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
            fields[name] = f
        cls.__fields__ = fields
        if kw_only is not None:
            cls.__kw_only__ = kw_only
        if not cls.__kw_only__:  # in order, a required field cannot follow one with a default
            seen_default = ""
            for f in fields.values():
                if not f.required:
                    seen_default = seen_default or f.name
                elif seen_default:
                    raise TypeError(
                        f"{cls.__name__}: required field {f.name!r} follows {seen_default!r}, which has a default"
                    )
        if frozen is not None:
            cls.__frozen__ = frozen
        if cls.__frozen__:
            cls.__setattr__ = _refuse_assignment  # type: ignore[method-assign,assignment]
            cls.__delattr__ = _refuse_assignment  # type: ignore[method-assign,assignment]
        if "__hash__" not in cls.__dict__:  # a class's own __hash__ stays, as with a dataclass
            # frozen: hashed by value; mutable and compared by value: unhashable
            cls.__hash__ = Record._hash if cls.__frozen__ else None  # type: ignore[method-assign,assignment]

    def __init__(self, *args: Any, **kw: Any) -> None:
        if args:
            names = list(self.__fields__)
            if self.__kw_only__ or len(args) > len(names):
                n = 0 if self.__kw_only__ else len(names)
                raise TypeError(f"{type(self).__name__}() takes {n} positional arguments but {len(args)} were given")
            for name, value in zip(names, args):
                if name in kw:
                    raise TypeError(f"{type(self).__name__}() got multiple values for argument {name!r}")
                kw[name] = value
        for name, f in self.__fields__.items():
            if name in kw:
                value = kw.pop(name)
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise TypeError(f"{type(self).__name__}() missing keyword argument {name!r}")
            object.__setattr__(self, name, value)
        if kw:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {next(iter(kw))!r}")
        self.__post_init__()

    def __post_init__(self) -> None:
        pass

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in self.__fields__.values() if f.compare)

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__fields__.values() if f.repr)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def _hash(self) -> int:
        return hash((self.__class__, self._values()))


def _refuse_assignment(self: Record, name: str, *_value: Any) -> None:
    raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")


def is_record(obj: object) -> bool:
    """Whether `obj` is a Record class or instance."""
    cls = obj if isinstance(obj, type) else type(obj)
    return issubclass(cls, Record)


def fields(obj: Record | type[Record]) -> tuple[Field, ...]:
    """The fields of a Record class or instance, in order."""
    return tuple(obj.__fields__.values())


def items(obj: Record) -> Iterator[tuple[str, Any]]:
    """(name, value) of each field of a record, in order."""
    for name in obj.__fields__:
        yield name, getattr(obj, name)


def replace(obj: Any, **changes: Any) -> Any:
    """A new record of the same class with `changes` made (the others copied over), checked again."""
    unknown = set(changes) - set(obj.__fields__)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    return type(obj)(**{**dict(items(obj)), **changes})


def asdict(obj: Record) -> dict[str, Any]:
    """The record as plain data: nested records, lists, tuples and dicts copied recursively."""
    return {name: _plain(value) for name, value in items(obj)}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return asdict(value)
    if type(value) in (list, tuple):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
