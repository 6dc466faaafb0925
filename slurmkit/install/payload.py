"""The prebuilt venv: built ONCE on the admin host from the wheelhouse, shipped to every node as one tarball.

Building the venv on each node (pypa/installer unpacking the wheels, then the import check compiling bytecode)
costs each node ~0.7 CPU-seconds; unpacking a tarball that already holds the installed files and their bytecode
costs it a `tar -x`. The tree is only usable by a node whose Python runs the same bytecode and binary modules as
the admin's: same implementation and minor version (cache_tag), same ABI (SOABI), same machine. So every node is
asked first (PROBE, ~20 ms) and a node that differs gets the wheels and builds its venv itself, as before.

What depends on the node's own interpreter is not in the tarball: bin/python (a link to the node's base Python)
and pyvenv.cfg (its `home`), written on the node from the probe's answer. The console scripts start with a
relocatable `/bin/sh` trampoline (the python next to the script), so one tarball fits every node's venv path.
The archive is deterministic (sorted, owner root, fixed times, gzip without a timestamp) and cached next to the
wheelhouse by what goes in, so a rerun ships the very same bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import sys
import sysconfig
import tarfile
import tempfile
from ..record import Record, field
from pathlib import Path

from ..errors import SlurmkitError
from ..files import atomic_write
from .bundle import SOURCE_DATE_EPOCH, Wheelhouse

_EPOCH = int(SOURCE_DATE_EPOCH)

# Runs on the node as `<install.python> -I -c PROBE`: what decides whether the admin's tree fits, and where the
# node's interpreter is. Fixed code, no argument.
PROBE = """\
import json, os, sys, sysconfig
exe = getattr(sys, "_base_executable", "") or sys.executable
def shut(p):  # the file other users cannot run, or the first directory on its way they cannot enter
    p = os.path.realpath(p)
    while os.stat(p).st_mode & 0o001:
        if p == "/":
            return ""
        p = os.path.dirname(p)
    return p
print(json.dumps({"cache_tag": sys.implementation.cache_tag, "soabi": sysconfig.get_config_var("SOABI") or "",
                  "machine": os.uname().machine, "version": ".".join(map(str, sys.version_info[:3])),
                  "base_executable": exe, "shut": shut(exe) or shut(sys.base_prefix)}))
"""

# the first lines of every console script: sh runs the python next to the (resolved) script; Python reads them
# as a string literal. The same trampoline as pip's and uv's for relocatable scripts.
TRAMPOLINE = '#!/bin/sh\n\'\'\'exec\' "$(dirname -- "$(realpath -- "$0")")/python" "$0" "$@"\n\' \'\'\'\n'


class PyId(Record, frozen=True, kw_only=False):
    """What a tree of installed files and bytecode needs of the interpreter that runs it."""

    cache_tag: str  # cpython-311: bytecode magic and implementation
    soabi: str  # cpython-311-x86_64-linux-gnu: the binary modules' ABI
    machine: str  # x86_64
    version: str  # 3.11.7
    base_executable: str  # the interpreter a venv's bin/python links to
    shut: str = ""  # a directory on its way (or itself) that other users cannot enter (run): jobs cannot use it

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def describe(self) -> str:
        return f"Python {self.version} ({self.soabi or self.cache_tag}, {self.machine})"


def parse_probe(text: str) -> PyId:
    """The probe's output -> PyId; ValueError saying what came back when it is not the probe's answer."""
    try:
        doc = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        doc = None
    keys = ("cache_tag", "soabi", "machine", "version", "base_executable")
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in keys):
        raise ValueError(f"the Python probe printed {text.strip()[:200]!r}, not its JSON answer")
    if not doc["base_executable"].startswith("/") or "\n" in doc["base_executable"]:
        raise ValueError(f"the Python probe named interpreter {doc['base_executable']!r}: not an absolute path")
    if len(doc["version"].split(".")) != 3:
        raise ValueError(f"the Python probe reported version {doc['version']!r}")
    cache_tag, soabi, machine, version, exe = (doc[k] for k in keys)
    return PyId(cache_tag, soabi, machine, version, exe, str(doc.get("shut") or ""))


def here() -> PyId:
    """This (the admin's) interpreter: the one that builds the tree and compiles its bytecode."""
    return PyId(
        sys.implementation.cache_tag,
        sysconfig.get_config_var("SOABI") or "",
        platform.machine(),
        ".".join(map(str, sys.version_info[:3])),
        getattr(sys, "_base_executable", "") or sys.executable,
    )


def misfit(built: PyId, node: PyId) -> str | None:
    """Why a tree built by `built` cannot run on `node` (None: it can)."""
    for what, a, b in (
        ("implementation/version", built.cache_tag, node.cache_tag),
        ("ABI", built.soabi, node.soabi),
        ("machine", built.machine, node.machine),
    ):
        if a != b:
            return f"the node's {node.describe()} differs from the admin's {built.describe()} ({what})"
    return None


def wheel_misfit(name: str, node: PyId) -> str | None:
    """Why the wheel file `name` cannot run on the node's Python (None: it can). pypa/installer installs any wheel
    it is given: a cp311 PyYAML in a 3.12 venv imports only its pure-Python fallback, so the tags are checked here.
    name-version(-build)-PYTAG-ABITAG-PLATTAG.whl; each tag may be a dotted set (py2.py3)."""
    parts = name[: -len(".whl")].split("-") if name.endswith(".whl") else []
    if len(parts) < 5:
        return f"{name}: not a wheel file name"
    pys, abis, plats = (set(parts[-3].split(".")), set(parts[-2].split(".")), set(parts[-1].split(".")))
    minor = node.minor.replace(".", "")
    cpython = node.cache_tag.startswith("cpython-")
    abi3 = "abi3" in abis and any(p[:3] == "cp3" and p[3:].isdigit() and int(p[3:]) <= int(minor[1:]) for p in pys)
    if "none" in abis:
        ok = bool(pys & {"py3", f"py{minor}"} or (cpython and f"cp{minor}" in pys))
    else:
        ok = cpython and (abi3 or bool(abis & {f"cp{minor}", f"cp{minor}m"}))
    if ok and ("any" in plats or any(p.endswith("_" + node.machine) for p in plats)):
        return None
    return f"built for {parts[-3]}-{parts[-2]}-{parts[-1]}, the node runs {node.describe()}"


def venv_choice(payload, wheels: list, node: PyId) -> tuple[bool, str]:
    """(unpack the prebuilt venv, the note for the node's row). Raises ValueError with the reason when neither the
    prebuilt venv nor every wheel fits the node's Python: a venv that "works" on pure-Python fallbacks is refused."""
    fits, note = _venv_choice(payload, wheels, node)
    if node.shut:
        note += (
            f"; warning: other users cannot run {node.base_executable} ({node.shut} is closed to them), so jobs "
            "cannot run the node venv's python: set install.python to a system Python such as /usr/bin/python3"
        )
    return fits, note


def _venv_choice(payload, wheels: list, node: PyId) -> tuple[bool, str]:
    if payload is not None and misfit(payload.python, node) is None:
        return True, f"prebuilt venv unpacked: it fits the node's {node.describe()}"
    bad = [(w.name, why) for w in wheels if (why := wheel_misfit(w.name, node))]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ValueError(
            f"refused: the node's {node.describe()} cannot use {bad[0][0]}: {bad[0][1]}{more}. Set install.python "
            f"to a Python {here().minor} on the node, or give install.wheelhouse wheels for Python {node.minor}"
        )
    if payload is None:
        return False, f"venv built on the node from the wheels ({node.describe()})"
    return False, f"venv built on the node from the wheels: {misfit(payload.python, node)}"


def pyvenv_cfg(node: PyId) -> bytes:
    """pyvenv.cfg for a venv run by the node's interpreter (what `python -m venv` writes, less `command`)."""
    home = os.path.dirname(node.base_executable)
    return (
        f"home = {home}\ninclude-system-site-packages = false\nversion = {node.version}\n"
        f"executable = {node.base_executable}\n"
    ).encode()


def site_packages(py: PyId) -> str:
    return f"lib/python{py.minor}/site-packages"


class Payload(Record, frozen=True, kw_only=False):
    path: Path  # the tarball on the admin host (in the cache)
    sha256: str
    python: PyId  # the admin interpreter it was built with
    bundle_id: str
    data: bytes = field(repr=False, default=b"")
    binary_modules: tuple[str, ...] = ()  # the tree's compiled extension modules (yaml._yaml, ...)


# -- building it (admin side) -----------------------------------------------------------------------------------


def _import_installer(wh: Wheelhouse) -> None:
    """pypa/installer: the admin's own, else the one in the wheelhouse (a pure-Python wheel imports as a zip)."""
    try:
        import installer

        return
    except ImportError:
        pass
    sys.path.insert(0, str(wh.installer))
    try:
        import installer.destinations
        import installer.scripts
        import installer.sources  # noqa: F401
    finally:
        sys.path.remove(str(wh.installer))


def _install_wheels(wh: Wheelhouse, tree: Path, py: PyId) -> None:
    """Every wheel but installer's into tree (a venv layout), console scripts with the relocatable trampoline."""
    _import_installer(wh)
    import installer
    from installer.destinations import SchemeDictionaryDestination
    from installer.scripts import Script
    from installer.sources import WheelFile

    class Relocatable(SchemeDictionaryDestination):
        def write_script(self, name, module, attr, section):
            _, code = Script(name, module, attr, section).generate("/bin/false", "posix")
            body = code.split(b"\n", 1)[1]
            with io.BytesIO(TRAMPOLINE.encode() + body) as stream:
                return self.write_to_fs("scripts", name, stream, is_executable=True)

    sp = tree / site_packages(py)
    scheme = {
        "purelib": str(sp),
        "platlib": str(sp),
        "headers": str(tree / "include" / "site"),
        "scripts": str(tree / "bin"),
        "data": str(tree),
    }
    dest = Relocatable(scheme, interpreter="/bin/false", script_kind="posix")  # no bytecode yet: see build()
    for w in wh.to_install:
        with WheelFile.open(w) as src:
            installer.install(src, dest, {"INSTALLER": b"slurmkit\n"})
    for f in (tree / "bin").iterdir():
        if not f.is_symlink() and f.read_bytes().startswith(
            b"#!/bin/false"
        ):  # a wheel's own script with a `#!python` line
            raise SlurmkitError(
                f"a wheel ships script {f.name} with a #!python line; a prebuilt venv cannot "
                "relocate it: set install.prebuilt_venv: false"
            )


def _compile(tree: Path, py: PyId) -> None:
    """Fixed mtimes first, then timestamp bytecode (checked at import against the fixed mtime tar restores)."""
    import compileall
    import py_compile

    for p in sorted(tree.rglob("*")):
        if not p.is_symlink():
            os.utime(p, (_EPOCH, _EPOCH))
    ok = compileall.compile_dir(
        str(tree / site_packages(py)), quiet=2, workers=1, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
    )
    if not ok:
        raise SlurmkitError("building the prebuilt venv: some installed module does not compile")
    for p in tree.rglob("__pycache__"):
        os.utime(p, (_EPOCH, _EPOCH))


def _tar(tree: Path, out: Path) -> None:
    def norm(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        ti.mtime = _EPOCH
        ti.mode &= 0o755
        return ti

    with (
        open(out, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf,
    ):
        for p in sorted(tree.rglob("*"), key=lambda p: p.relative_to(tree).as_posix()):
            tf.add(p, arcname=p.relative_to(tree).as_posix(), recursive=False, filter=norm)


def build(wh: Wheelhouse, cache_dir: Path, say=lambda m: None) -> Payload:
    """The tarball of a venv tree with every wheel installed and compiled, for nodes whose Python fits here()."""
    py = here()
    key = hashlib.sha256(f"{wh.bundle_id}\n{py}\n".encode()).hexdigest()[:16]
    out = cache_dir / "payload" / f"{key}.tar.gz"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        say(f"building the prebuilt venv for {py.describe()} in {out}")
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
        try:
            tree = tmp / "venv"
            (tree / "bin").mkdir(parents=True)
            os.symlink("python", tree / "bin" / "python3")
            os.symlink("python", tree / "bin" / f"python{py.minor}")
            if sys.maxsize > 2**32:
                os.symlink("lib", tree / "lib64")
            _install_wheels(wh, tree, py)
            _compile(tree, py)
            _tar(tree, tmp / "out.tar.gz")
            atomic_write(out, (tmp / "out.tar.gz").read_bytes(), mode=0o600)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    data = out.read_bytes()
    return Payload(out, hashlib.sha256(data).hexdigest(), py, wh.bundle_id, data, binary_modules(data, py))


def binary_modules(data: bytes, py: PyId) -> tuple[str, ...]:
    """The dotted names of the extension modules in the tarball: what the node's import check loads (the pure
    Python was compiled here by the same minor version; a binary module is what a node can still refuse)."""
    sp = site_packages(py) + "/"
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        for name in tf.getnames():
            if name.startswith(sp) and name.endswith(".so"):
                rel = name[len(sp) :].split("/")
                mod = rel[-1].split(".", 1)[0]
                if all(p.isidentifier() for p in rel[:-1]) and mod.isidentifier():
                    out.append(".".join([*rel[:-1], mod]))
    return tuple(sorted(out))


# Runs on the node as `<venv>/bin/python -c IMPORT_CHECK MODULE...`: the payload's binary modules load on this
# node's Python, and slurmkit imports from the venv (prints its version). Fixed code, module names as argv.
IMPORT_CHECK = """\
import importlib, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
import slurmkit
print(slurmkit.__version__)
"""
