"""slurmkit.lazymod, as the CLI uses it: modules a command never needs are not loaded, and code that does use them
gets the real thing. Each case runs in a fresh interpreter (sys.modules is what is being tested)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _py(code: str, *, cwd: Path = REPO, env: dict | None = None) -> str:
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys\nsys.path.insert(0, {str(REPO)!r})\n{code}"],
                       capture_output=True, text=True, timeout=60, cwd=cwd, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def test_a_function_imported_from_a_deferred_module_loads_it_when_called():
    out = _py("from slurmkit import lazymod\n"
              "lazymod.defer('inspect', calls=('getattr_static',))\n"
              "from inspect import getattr_static\n"
              "before = type(sys.modules['inspect']).__name__\n"
              "class C:\n    x = 5\n"
              "got = getattr_static(C, 'x')\n"
              "import inspect\n"
              "print(before, got, type(sys.modules['inspect']).__name__, inspect.getattr_static is not getattr_static,"
              " getattr_static.__name__)")
    assert out == "_Deferred 5 module True getattr_static"


def test_a_deferred_module_is_not_a_package():
    """`from X import fn` reads only fn: the stand-in answers no __path__ without loading the module."""
    out = _py("from slurmkit import lazymod\n"
              "lazymod.defer('tempfile', calls=('gettempdir',))\n"
              "kind = lambda: type(sys.modules['tempfile']).__name__\n"
              "print(hasattr(sys.modules['tempfile'], '__path__'), kind())\n"
              "from tempfile import gettempdir\n"
              "print(kind(), bool(gettempdir()), kind())\n"
              "print(sys.modules['tempfile'].mkdtemp.__module__)")
    assert out.split("\n") == ["False _Deferred", "_Deferred True module", "tempfile"]


def test_a_submodule_is_refused():
    out = _py("from slurmkit import lazymod\n"
              "try:\n    lazymod.defer('urllib.parse')\nexcept ValueError as e:\n    print(e)\n"
              "print('urllib.parse' in sys.modules and type(sys.modules['urllib.parse']).__name__)")
    assert out.split("\n")[0].startswith("defer('urllib.parse'): ")
    assert out.split("\n")[1] in ("False", "module")


def test_a_new_specs_render_leaves_out_what_jinja2_imports_for_filters_it_never_runs(tmp_path):
    """`slurmkit render` of a spec it has not seen (the submission cache cannot answer) imports Jinja2, but not
    `inspect` or `tempfile` (~20% of Jinja2's import) once the templates' bytecode cache is written (writing it is
    what tempfile is for); the script is the one the API renders with both loaded."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\ngpus_per_node: 1\ncommand: [python, train.py]\n")
    value = uuid.uuid4().hex  # never seen: the full path, not the submission cache
    env = dict(os.environ, SLURMKIT_CONFIG="/dev/null", HOME=str(tmp_path))
    code = (f"import sys\nsys.path.insert(0, {str(REPO)!r})\nimport atexit, json\n"
            "atexit.register(lambda: print(json.dumps({m: type(sys.modules.get(m)).__name__ for m in"
            " ('jinja2', 'inspect', 'tempfile')}), file=sys.stderr))\n"
            f"sys.argv = ['slurmkit', 'render', {str(spec)!r}, '--set', 'env.RUN={value}']\n"
            "from slurmkit.entry import main\nmain()")
    for run in ("first", "next"):  # the first compiles the templates into the bytecode cache
        r = subprocess.run([sys.executable, "-I", "-c", code.replace(value, value + run if run == "first" else value)],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
    # Python 3.13's dataclasses loads inspect itself, with the first dataclass (slurmkit/lazymod.py): not Jinja2's
    by_dataclasses = _py("from slurmkit import lazymod\nlazymod.defer('inspect')\nimport dataclasses\n"
                         "@dataclasses.dataclass\nclass D:\n    'doc'\n    x: int = 0\n"
                         "print(type(sys.modules['inspect']).__name__)")
    assert json.loads(r.stderr.strip().splitlines()[-1]) == {"jinja2": "module", "inspect": by_dataclasses,
                                                              "tempfile": "_Deferred"}
    api = _py("import slurmkit, inspect, tempfile\n"
              f"print(slurmkit.render({str(spec)!r}, env={{'RUN': {value!r}}}), end='')", cwd=tmp_path, env=env)
    assert r.stdout.strip() == api and f"RUN={value}" in api


def test_the_attr_filter_works_through_the_stand_in():
    """Jinja2's `attr` filter is the one use of inspect.getattr_static: a site template that uses it renders as
    it would with inspect loaded."""
    template = "{{ x|attr('real') }} {{ x|attr('imag') }} [{{ x|attr('nope') }}]"
    plain = _py(f"import jinja2\nprint(jinja2.Environment().from_string({template!r}).render(x=3+4j))")
    deferred = _py("from slurmkit import lazymod\nlazymod.defer('inspect', calls=('getattr_static',))\n"
                   "import jinja2\nprint(type(sys.modules['inspect']).__name__)\n"
                   f"print(jinja2.Environment().from_string({template!r}).render(x=3+4j))\n"
                   "print(type(sys.modules['inspect']).__name__)")
    assert plain == "3.0 4.0 []"
    assert deferred.split("\n") == ["_Deferred", plain, "module"]


def test_threads_that_reach_a_deferred_module_at_once_get_one_real_module():
    """The submit's cluster check runs on a thread beside the render: both may be first to use a deferred module.
    Each gets the real one, and it is imported once (one module object, the one in sys.modules)."""
    # threads switch as often as the interpreter can: without the import lock around its check, the stand-in's
    # removal raced (a KeyError, or a second copy of the module) in every run of this test
    out = _py("import threading\nsys.setswitchinterval(1e-6)\nfrom slurmkit import lazymod\n"
              "for rep in range(200):\n"
              "    sys.modules.pop('tempfile', None)\n"
              "    lazymod.defer('tempfile', calls=('gettempdir',))\n"
              "    from tempfile import gettempdir\n"
              "    import tempfile\n"
              "    seen, start = [], threading.Barrier(8)\n"
              "    def use(i):\n"
              "        start.wait()\n"
              "        ok = bool(gettempdir()) if i % 2 else tempfile.mkdtemp.__module__ == 'tempfile'\n"
              "        seen.append((ok, id(sys.modules['tempfile'])))\n"
              "    ts = [threading.Thread(target=use, args=(i,)) for i in range(8)]\n"
              "    [t.start() for t in ts]; [t.join() for t in ts]\n"
              "    real = sys.modules['tempfile']\n"
              "    assert type(real).__name__ == 'module' and seen == [(True, id(real))] * 8, (rep, seen, id(real))\n"
              "print('ok')")
    assert out == "ok"
