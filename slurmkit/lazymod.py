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
"""

from __future__ import annotations

import sys
from types import ModuleType


class _Deferred(ModuleType):
    def __getattr__(self, attr: str):  # only for what the stand-in lacks: everything but the module basics
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        import importlib

        real = importlib.import_module(name)
        return getattr(real, attr)


def defer(*names: str) -> None:
    """Make each module in `names` that is not imported yet load on the first attribute read from it."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = _Deferred(name)
