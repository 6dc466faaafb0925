"""Standard-library modules loaded on first use, for the hooks' start.

`dataclasses` imports `inspect` for one thing only: the `__doc__` it writes for a class without a docstring. The
`inspect` import (with ast, dis and tokenize) costs the prolog more CPU than all of its checks, on every job, and
every dataclass on the hooks' path has a docstring. (Python 3.13's dataclasses reads every class's annotations
through `inspect.get_annotations`, so there the real module loads with the first dataclass; 3.11 and 3.14 do not.) `defer("inspect")` puts a stand-in module in sys.modules: an
`import inspect` binds the stand-in without loading anything, and the first attribute read from it imports the
real module (which then replaces the stand-in in sys.modules) and answers from it. importlib.util.LazyLoader
cannot do this on Python 3.11: the import statement itself reads the lazy module's `__spec__`, which loads it.
tests/unit/test_hook_start.py checks both halves: the hooks never load inspect, and a dataclass without a
docstring still gets its generated one.

A `from inspect import getattr_static` would load the module at once (it reads the attribute). `defer(name,
calls=("getattr_static",))` gives the stand-in a function of that name that loads the real module when it is
called and calls the real one: the `slurmkit submit` of a new spec defers what Jinja2 imports for filters and
caches the submission never runs (`inspect`, `tempfile`: ~15% of Jinja2's import).
Only top-level plain modules: never a package (the stand-in has no `__path__`, so `from X import y` reads `y`
and nothing else; reading `__path__` would load the module), never a submodule (`import a.b` finds a stand-in in
sys.modules and never sets the attribute `b` on the package, so `a.b.f` would fail).
"""

from __future__ import annotations

import sys
from types import ModuleType


def _load(name: str) -> ModuleType:
    """The real module: the stand-in leaves sys.modules first, so the import machinery loads the module. Two
    threads may get here at once (the submit's cluster check runs on one): the second finds the module being
    imported, and the import lock makes it wait for the first."""
    import _imp  # builtin: the interpreter's global import lock, held by importlib around its own sys.modules reads

    _imp.acquire_lock()
    try:
        if isinstance(sys.modules.get(name), _Deferred):  # never the real module another thread just put there
            del sys.modules[name]
    finally:
        _imp.release_lock()
    import importlib

    return importlib.import_module(name)


class _Deferred(ModuleType):
    def __getattr__(self, attr: str):  # only for what the stand-in lacks: everything but the module basics
        if attr == "__path__":  # a plain module has none; `from X import y` asks before it reads y
            raise AttributeError(attr)
        return getattr(_load(self.__name__), attr)


def _trampoline(name: str, fn: str):
    def call(*args, **kwargs):
        return getattr(_load(name), fn)(*args, **kwargs)

    call.__name__ = call.__qualname__ = fn
    return call


def defer(*names: str, calls: tuple[str, ...] = ()) -> None:
    """Make each module in `names` that is not imported yet load on the first attribute read from it; each name in
    `calls` is a function the stand-ins bind at once (for `from X import fn`), which loads the module when called."""
    for name in names:
        if "." in name:
            raise ValueError(f"defer({name!r}): a submodule's stand-in would not be its package's attribute")
        if name not in sys.modules:
            m = sys.modules[name] = _Deferred(name)
            for fn in calls:
                setattr(m, fn, _trampoline(name, fn))
