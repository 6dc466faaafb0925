"""slurmkit.record: the hooks' records behave as the dataclasses they replace (init, defaults, repr, equality,
frozen, replace, asdict), and making one costs no `dataclasses` (the hooks never import it)."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurmkit.record import Record, asdict, field, fields, replace

REPO = Path(__file__).resolve().parents[3]


class Point(Record, kw_only=False):
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    note: object = field(default=None, repr=False, compare=False)


@dataclasses.dataclass
class DPoint:
    x: int
    y: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    note: object = dataclasses.field(default=None, repr=False, compare=False)


class Frozen(Record, frozen=True):
    name: str
    n: int = 1


@given(st.integers(), st.integers(), st.lists(st.text(max_size=3), max_size=3), st.integers())
def test_a_record_reads_and_compares_as_the_dataclass_it_replaces(x, y, tags, note):
    r, d = Point(x, y=y, tags=tags, note=note), DPoint(x, y=y, tags=tags, note=note)
    assert repr(r) == repr(d).replace("DPoint", "Point")
    assert asdict(r) == dataclasses.asdict(d)
    assert (r == Point(x, y, list(tags), note=None)) == (d == DPoint(x, y, list(tags), note=None)) is True
    assert (r == Point(x + 1, y)) is False
    assert replace(r, y=y + 1).y == y + 1 and r.y == y


def test_defaults_factories_and_the_errors_a_caller_sees():
    a, b = Point(1), Point(1)
    assert a.tags == [] and a.tags is not b.tags and Point.y == 0
    with pytest.raises(TypeError, match="missing keyword argument 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="takes 0 positional arguments"):
        Frozen("a")
    with pytest.raises(TypeError, match="unhashable"):
        hash(a)
    with pytest.raises(TypeError, match="has no field 'z'"):
        replace(a, z=1)
    assert [f.name for f in fields(Point)] == ["x", "y", "tags", "note"]


def test_frozen_refuses_assignment_and_hashes_by_value():
    f = Frozen(name="a")
    with pytest.raises(AttributeError, match="Frozen is frozen"):
        f.n = 2
    assert hash(f) == hash(Frozen(name="a", n=1)) and {f, Frozen(name="a")} == {f}


def test_class_statements_a_dataclass_refuses_are_refused():
    with pytest.raises(TypeError, match="mutable default"):
        class Bad(Record):
            items: list = []  # noqa: RUF012 - the mistake under test
    with pytest.raises(TypeError, match="required field 'b' follows 'a'"):
        class Order(Record, kw_only=False):
            a: int = 1
            b: int


def test_inheritance_and_post_init():
    class Base(Record):
        a: int = 1

        def __post_init__(self):
            if self.a < 0:
                raise ValueError("a must be >= 0")

    class Child(Base):
        b: str = "x"

    assert repr(Child(b="y")) == "test_inheritance_and_post_init.<locals>.Child(a=1, b='y')"
    with pytest.raises(ValueError, match="a must be >= 0"):
        Child(a=-1)


def test_making_records_imports_no_dataclasses():
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
            "import slurmkit.settings, slurmkit.health.base, slurmkit.proc, slurmkit.drain\n"
            "slurmkit.settings.Settings()\n"
            "print('dataclasses' in sys.modules, 'inspect' in sys.modules)")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_records_survive_pickle_and_copy():
    import copy
    import pickle

    f = Frozen(name="a", n=2)
    assert pickle.loads(pickle.dumps(f)) == f and copy.deepcopy(f) == f
    p = Point(1, tags=["x"])
    q = copy.deepcopy(p)
    assert q == p and q.tags is not p.tags


def test_class_variables_are_not_fields():
    from typing import ClassVar

    class WithClassVar(Record):
        kinds: ClassVar[tuple[str, ...]] = ("a", "b")
        name: str = "x"

    assert [f.name for f in fields(WithClassVar)] == ["name"] and WithClassVar().kinds == ("a", "b")


def test_a_record_in_a_module_without_the_future_import_reads_its_own_annotations():
    # this test module has no `from __future__ import annotations`: on Python 3.14 its class annotations are
    # deferred (PEP 649, no `__annotations__` in the class dictionary), and a name not yet defined is still a field
    class Later(Record):
        child: "Node | None" = None  # noqa: F821 (Node is defined after Later)
        count: int = 0
        limit: "ClassVar[int]" = 3  # noqa: F821 (a forward reference to ClassVar is a class variable too)

    class Node(Record):
        name: str

    assert [f.name for f in fields(Later)] == ["child", "count"] and Later.limit == 3
    assert Later(child=Node(name="n"), count=2) == Later(child=Node(name="n"), count=2)
