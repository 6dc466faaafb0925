"""What `install` puts on a node: the hook scripts, the site config and a wheelhouse (slurmkit + what it needs).

The wheelhouse is built once on the admin host and cached by the hash of the source tree, so a rerun ships the
very same bytes (and changes nothing on the nodes). Sites without a package index on the admin host point
`install.wheelhouse` at a directory of prebuilt wheels instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from ..record import Record, field
from pathlib import Path

from ..files import publish
from ..errors import SlurmkitError, UsageError
from ..nodesettings import render as render_settings, settings_path
from .layout import Layout

SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01: wheels built twice from the same tree are byte-identical


class Artifact(Record, frozen=True, kw_only=False):
    """One file as it must be on the node."""

    role: str  # prolog | epilog | config | settings | wheel | payload | stamp
    path: str  # absolute path on the node
    data: bytes = field(repr=False)
    mode: int = 0o644  # permission bits; owner is always root (uid 0, gid 0)
    digest: str = ""  # sha256 of data when the caller has it already (a large payload: hashed once)

    @property
    def sha256(self) -> str:
        return self.digest or hashlib.sha256(self.data).hexdigest()


class Wheelhouse(Record, frozen=True, kw_only=False):
    directory: Path
    wheels: tuple[Path, ...]  # every wheel, sorted by name
    version: str  # slurmkit's version in it

    @property
    def installer(self) -> Path:
        return next(w for w in self.wheels if w.name.startswith("installer-"))

    @property
    def to_install(self) -> list[Path]:
        """The wheels that go into the venv (all but pypa/installer, which only runs the install)."""
        return [w for w in self.wheels if not w.name.startswith("installer-")]

    @property
    def bundle_id(self) -> str:
        h = hashlib.sha256()
        for w in self.wheels:
            h.update(w.name.encode() + b"\0" + hashlib.sha256(w.read_bytes()).hexdigest().encode() + b"\n")
        return h.hexdigest()[:12]


def hook_text(script: bytes, lay: Layout) -> bytes:
    """The hook script with a preamble after its first line naming the venv's Python and the site config.

    The hooks pick their interpreter as $SLURMKIT_PYTHON, else <dir>/../.venv/bin/python, else
    /opt/slurmkit/venv/bin/python, else python3; Slurm runs them with no environment of ours, so the installed
    copy says where this install put things (an environment set by a wrapper still wins), and where the hook
    agent listens (the site's agent.socket; "off" unless agent.enabled: the hooks then never try a socket).
    """
    first, sep, rest = script.partition(b"\n")
    if not first.startswith(b"#!"):
        raise UsageError("a hook script must start with a #! line", path=None)
    sock = lay.agent_socket if lay.agent_enabled else "off"
    pre = (
        "# installed by `slurmkit install`: where this node's slurmkit venv, site config and hook agent are\n"
        f': "${{SLURMKIT_PYTHON:={lay.python}}}" "${{SLURMKIT_CONFIG:={lay.config}}}"\n'
        # single quotes: a `}` in the path ({cluster}) would end a ${...:=...}
        f"[ -n \"${{SLURMKIT_AGENT_SOCKET+set}}\" ] || SLURMKIT_AGENT_SOCKET='{sock}'\n"
        "export SLURMKIT_PYTHON SLURMKIT_CONFIG SLURMKIT_AGENT_SOCKET\n"
    )
    if "'" in sock:
        raise UsageError(f"agent.socket {sock!r}: a quote cannot be written into the hook scripts")
    for v in (lay.python, lay.config, sock):
        if any(c in v for c in '"$`\\\n'):
            raise UsageError(f"install path {v!r}: characters a shell would interpret")
    return first + b"\n" + pre.encode() + rest if sep else first + b"\n" + pre.encode()


def _unit_word(v: str, *, expands: bool = False) -> str:
    """One word of a systemd unit line, quoted so that it reaches the process as it is: spaces and quotes, `%`
    (specifiers) and, in a word systemd expands variables in (`expands`: ExecStart's arguments after the command),
    `$`."""
    if "\n" in v or "\0" in v:
        raise UsageError(f"install path {v!r}: a newline cannot be written into a systemd unit")
    v = v.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"' + (v.replace("$", "$$") if expands else v) + '"'


def agent_argv(lay: Layout) -> list[str]:
    """How the agent runs on this node (the unit's ExecStart; by hand where systemd does not run)."""
    return [lay.python, "-I", "-m", "slurmkit.agent.server", "--socket", lay.agent_socket]


def agent_unit_text(lay: Layout) -> bytes:
    """The hook agent's systemd unit for this node's venv and site config. KillMode=process: a restart (or stop)
    of the agent never kills a hook in flight or a job's efficiency sampler, which run as its children."""
    argv = agent_argv(lay)
    return (
        "# installed by `slurmkit install`: the prolog and epilog hand their work to this agent\n"
        "# (slurmkit/agent/server.py); without it they run in their own processes, as before\n"
        "[Unit]\n"
        "Description=slurmkit hook agent (runs the Slurm prolog and epilog with slurmkit preloaded)\n"
        "Before=slurmd.service\n"
        "\n[Service]\n"
        f"Environment={_unit_word('SLURMKIT_CONFIG=' + lay.config)}\n"
        f"ExecStart={' '.join(_unit_word(a, expands=i > 0) for i, a in enumerate(argv))}\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "KillMode=process\n"
        "\n[Install]\n"
        "WantedBy=multi-user.target\n"
    ).encode()


def stamp_bytes(lay: Layout, wh: Wheelhouse, files: list[Artifact], bundle_id: str | None = None) -> bytes:
    """The version stamp: deterministic (no time in it), so an unchanged install leaves it unchanged."""
    bundle_id = bundle_id or wh.bundle_id
    doc = {
        "slurmkit_version": wh.version,
        "bundle": bundle_id,
        "venv": lay.venv_for(bundle_id),
        "venv_from": "prebuilt" if any(a.role == "payload" for a in files) else "wheels",
        "files": {a.path: a.sha256 for a in sorted(files, key=lambda a: a.path)},
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def artifacts(
    lay: Layout,
    wh: Wheelhouse,
    prolog: bytes,
    epilog: bytes,
    site_config: bytes,
    health: bytes = b"",
    payload=None,
    bundle_id: str | None = None,
) -> list[Artifact]:
    """Every file for one node, the stamp last (the health script when there is one). With a payload (the
    prebuilt venv's tarball, payload.py) it goes instead of the wheels."""
    if payload is not None:
        out = [Artifact("payload", lay.payload, payload.data, 0o644, payload.sha256)]
    else:
        out = [Artifact("wheel", f"{lay.wheel_dir}/{w.name}", w.read_bytes(), 0o644) for w in wh.wheels]
    out += [
        Artifact("config", lay.config, site_config, 0o644),
        # the same config through the one loader, stamped with its sha256: the hooks skip the YAML while it matches
        Artifact("settings", settings_path(lay.config), render_settings(site_config, lay.config), 0o644),
        Artifact("prolog", lay.prolog, hook_text(prolog, lay), 0o755),
        Artifact("epilog", lay.epilog, hook_text(epilog, lay), 0o755),
    ]
    if health:
        out.append(Artifact("health", lay.health, hook_text(health, lay), 0o755))
    if lay.agent_unit:
        out.append(Artifact("agent-unit", lay.agent_unit, agent_unit_text(lay), 0o644))
    out.append(Artifact("stamp", lay.stamp, stamp_bytes(lay, wh, out, bundle_id), 0o644))
    return out


# -- the local sources ------------------------------------------------------------------------------------------


def source_tree() -> Path | None:
    """The slurmkit source checkout this package runs from (an editable install), or None."""
    import slurmkit

    top = Path(slurmkit.__file__).resolve().parent.parent
    pp = top / "pyproject.toml"
    if pp.exists() and 'name = "slurmkit"' in pp.read_text(errors="replace"):
        return top
    return None


def installed_hooks_dir() -> Path:
    """Where a wheel install keeps the prolog/epilog scripts (pyproject's data-files): <prefix>/share/slurmkit/hooks."""
    return Path(sys.prefix) / "share" / "slurmkit" / "hooks"


def hook_sources(install) -> tuple[Path, Path, Path]:
    """The prolog, epilog and health script to install: install.{prolog,epilog,health}_src, else the checkout's
    prolog/prolog, epilog/epilog and health/health, else the copies a wheel install carries
    (<prefix>/share/slurmkit/hooks)."""
    src = source_tree()
    out = []
    for which, given in (
        ("prolog", install.prolog_src),
        ("epilog", install.epilog_src),
        ("health", install.health_src),
    ):
        if given:
            p = Path(given).expanduser()
        elif src is not None:
            p = src / which / which
        else:
            p = installed_hooks_dir() / which
            if not p.is_file():
                raise UsageError(
                    f"install.{which}_src: not set, no slurmkit source tree, and this install has no "
                    f"{p} (reinstall slurmkit from its wheel, or set install.{which}_src)"
                )
        if not p.is_file():
            raise UsageError(f"install.{which}_src: no such file {p}")
        out.append(p)
    return out[0], out[1], out[2]


def _tree_hash(top: Path, extra: list[str]) -> str:
    h = hashlib.sha256()
    files = [top / "pyproject.toml", top / "README.md"]
    files += sorted(p for p in (top / "slurmkit").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for f in files:
        if f.exists():
            h.update(str(f.relative_to(top)).encode() + b"\0" + f.read_bytes() + b"\0")
    for e in extra:
        h.update(e.encode() + b"\n")
    return h.hexdigest()[:16]


def _pinned(names: list[str]) -> list[str]:
    from importlib import metadata

    out = []
    for n in [*names, "installer"]:
        try:
            out.append(f"{n}=={metadata.version(n)}")
        except metadata.PackageNotFoundError:
            raise UsageError(
                f"install.node_packages: {n} is not installed here, so its version is unknown; "
                "install it or set install.wheelhouse"
            ) from None
    return out


def cache_root() -> Path:
    """Where the admin host keeps what it builds for the nodes (wheelhouses, prebuilt venvs): the user's private
    cache (slurmkit/files.py). What is there goes to every node as root, so a cache another user could write is
    never used: then a private directory for this run alone (built again next time)."""
    from ..files import cache_dir

    d = cache_dir("install")
    return Path(d) if d else Path(tempfile.mkdtemp(prefix="slurmkit-install-"))


def wheelhouse(
    install, *, cache_dir: Path | None = None, say=lambda m: None, timeout: float = 600, build: bool = False
) -> Wheelhouse:
    """install.wheelhouse when set (unless `build`); else build one (cached by what goes in): slurmkit's own wheel
    (`pip wheel` of the checkout, or the installed distribution repacked: see repack.py) and `pip wheel` of
    install.node_packages at the versions installed here, plus pypa/installer."""
    if install.wheelhouse and not build:
        return _read_wheelhouse(Path(install.wheelhouse).expanduser(), "install.wheelhouse")
    src = source_tree()
    pins = _pinned(list(install.node_packages))
    cache = cache_dir or cache_root() / "wheelhouse"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        if src is not None:
            key = _tree_hash(src, [sys.version.split()[0], *pins])
        else:
            from .repack import repack

            own = repack(tmp)
            key = hashlib.sha256(own.read_bytes() + "\n".join([sys.version.split()[0], *pins]).encode()).hexdigest()[
                :16
            ]
        target = cache / key
        if (target / ".complete").exists():
            return _read_wheelhouse(target, str(target))
        say(f"building the wheelhouse in {target} (slurmkit from {src or 'this install'}, {' '.join(pins)})")
        _pip_wheels(tmp, src, pins, timeout)
        (tmp / ".complete").write_text("\n".join(pins) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _read_wheelhouse(target, str(target))


def _pip_wheels(into: Path, src: Path | None, pins: list[str], timeout: float) -> None:
    from .. import proc
    from ..errors import CommandError

    env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into)]
    try:
        if src is not None:
            proc.run([*pip, str(src)], timeout=timeout, env=env)
        proc.run([*pip, *pins], timeout=timeout, env=env)
    except CommandError as e:
        errs = [ln.strip() for ln in e.stderr.splitlines() if "error" in ln.lower() and "WARNING" not in ln]
        raise SlurmkitError(f"building the wheelhouse failed: {errs[0] if errs else e}") from None


def export_wheelhouse(wh: Wheelhouse, dest: Path) -> list[Path]:
    """Copy the wheelhouse's wheels into dest (created; other files there are left alone, a stale slurmkit or
    installer wheel is refused so the directory stays a valid install.wheelhouse)."""
    dest.mkdir(parents=True, exist_ok=True)
    names = {w.name for w in wh.wheels}
    stale = [
        p.name for p in dest.glob("*.whl") if p.name not in names and p.name.split("-")[0] in ("slurmkit", "installer")
    ]
    if stale:
        raise UsageError(f"--build-wheelhouse: {dest} already holds {', '.join(sorted(stale))}; use an empty directory")
    out = []
    for w in wh.wheels:
        shutil.copyfile(w, dest / w.name)
        out.append(dest / w.name)
    return out


def _read_wheelhouse(d: Path, label: str) -> Wheelhouse:
    if not d.is_dir():
        raise UsageError(f"{label}: no such directory {d}")
    wheels = tuple(sorted(d.glob("*.whl"), key=lambda p: p.name))
    sk = [w for w in wheels if w.name.startswith("slurmkit-")]
    if len(sk) != 1:
        raise UsageError(f"{label}: expected exactly one slurmkit-*.whl in {d}, found {len(sk)}")
    if not any(w.name.startswith("installer-") for w in wheels):
        raise UsageError(f"{label}: no installer-*.whl (pypa/installer builds the venv on the node) in {d}")
    version = sk[0].name.split("-")[1]
    return Wheelhouse(d, wheels, version)
