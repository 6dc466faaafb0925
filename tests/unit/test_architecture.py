"""The package's shape, as the next engineer meets it (issue 27): no module import cycle, no module over 500
lines, no stand-ins in sys.modules, one place that decides the cache directory, few hand-written renames."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "slurmkit"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The slurmkit modules `name` imports, at any depth of its code (a function-level import is still an edge; one
    under `if TYPE_CHECKING:` is not: it never runs)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                root = base[: len(base) - node.level + 1]
                mod = ".".join(root + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_module_import_cycle():
    mods = _modules()
    known = set(mods)
    # a package's __init__ importing its own submodules is how a package presents its API, not a cycle between
    # concerns: edges from a package to what is inside it are left out
    graph = {n: {t for t in _imports(n, p, known) if not t.startswith(n + ".")} for n, p in mods.items()}
    assert _cycles(graph) == []


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_nothing_assigns_into_sys_modules():
    for p in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    assert not (isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules"), p


def test_the_cache_directory_is_decided_in_one_module():
    users = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "XDG_CACHE_HOME" in p.read_text())
    assert users == ["files.py"]


def test_one_rename_into_place():
    # files.publish is the rename; fsdest's is relative to directory descriptors (no path a link could redirect)
    users = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "os.replace(" in p.read_text())
    assert users == ["checkpoint/fsdest.py", "files.py"]


def test_one_record_type():
    # slurmkit.record.Record is every record's base: `dataclasses` would bring inspect back onto the hooks' path
    users = sorted(
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and "dataclasses" in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module])
    )
    assert users == []
