"""The submission cache: what `slurmkit submit`/`render` made of the same spec file, site config and --set items,
so a resubmission skips PyYAML, the site schema, the spec loader and the renderer (most of the CLI's start-up).

An entry is keyed by the bytes of the spec and of the site config (and their real paths, the --set items, $HOME,
the slurmkit version and install prefix), and is used only while every other file the script was made from is
unchanged: each template name still resolves, through the same search path, to the same file (path, mtime, size),
and the topology profile has the same mtime and size. It holds the script and the few values the cluster check
and the backend need; the check itself runs every time, on the live cluster, and anything it refuses is redone
through the full path, so errors read exactly as without the cache. SLURMKIT_NO_CACHE=1 turns it off.
Light by design: os and json only (the entry runs it before importing anything else).
"""

from __future__ import annotations

import json
import os
import sys

from .. import __version__

_LIMIT = 16 * 1024 * 1024  # the spec loader's own limit; a bigger file is left to it (and its error)


def resolve_template(dirs: list[str], name: str):
    """(path, mtime_ns, size) of the first `name` in `dirs`, as the template loader finds it; None if none."""
    for d in dirs:
        p = os.path.join(d, name)
        try:
            st = os.stat(p)
        except OSError:
            continue
        return p, st.st_mtime_ns, st.st_size
    return None


def _stat(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _read(path: str) -> bytes | None:
    """A regular file's bytes (never a FIFO or a device: the full path's bounded reader says why); None else."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _LIMIT:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(_LIMIT + 1)
        return data if len(data) <= _LIMIT else None
    finally:
        os.close(fd)


def key_for(config_arg: str | None, spec_path: str, sets) -> str | None:
    """The entry's file for this command line, or None (caching off, or an input the full path must handle)."""
    if os.environ.get("SLURMKIT_NO_CACHE"):
        return None
    try:  # the builtin module: hashlib pulls in OpenSSL, a few ms of start-up
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import sha256
    cfg = config_arg or os.environ.get("SLURMKIT_CONFIG") or None
    h = sha256()
    spec = _read(spec_path)
    if spec is None:
        return None
    parts = [
        __version__,
        sys.prefix,
        os.environ.get("HOME", ""),
        os.path.realpath(spec_path),
        os.path.basename(spec_path),
        list(sets),
        cfg,
        os.path.realpath(cfg) if cfg else None,
    ]
    h.update(json.dumps(parts).encode())
    h.update(b"\0spec\0" + spec)
    if cfg is None:  # the default path, which may be absent (then: all defaults)
        from ..settings import DEFAULT_PATH

        cfg = DEFAULT_PATH
    if os.path.lexists(cfg):
        data = _read(cfg)
        if data is None:
            return None
        h.update(b"\0config\0" + data)
    else:
        h.update(b"\0no config\0" + cfg.encode())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmkit", "submit", h.hexdigest() + ".json")


def get(path: str | None) -> dict | None:
    """The entry at `path` if every file it was made from is unchanged; else None."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            e = json.load(f)
        for name, p, mtime, size in e["templates"]:
            if resolve_template(e["template_dirs"], name) != (p, mtime, size):
                return None
        if e["profile"] is not None and _stat(e["profile"][0]) != e["profile"][1:]:
            return None
        if not isinstance(e["script"], str):
            return None
        return e
    except (OSError, ValueError, KeyError, TypeError):
        return None


def put(path: str | None, spec, r, settings) -> None:
    """Record what the full path made (`spec`, the Rendered `r`, the site `settings`) for the next time."""
    if path is None or r.template_deps is None:
        return
    profile = None
    if r.profile_path:
        st = _stat(r.profile_path)
        if st is None:
            return
        profile = [r.profile_path, *st]
    entry = {
        "script": r.script,
        "template_dirs": r.template_dirs,
        "templates": r.template_deps,
        "profile": profile,
        "check": {
            "partition": r.partition,
            "cpus_per_node": r.cpus_per_node,
            "spec_partition": spec.partition,
            "nodes": spec.nodes,
            "gpus_per_node": spec.gpus_per_node,
        },
        "check_cluster": settings.submit.check_cluster,
        "slurm": {
            "backend": settings.slurm.backend,
            "timeout": settings.slurm.timeout,
            "bin_dir": settings.slurm.bin_dir,
        },
    }
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(entry, f)
        os.replace(tmp, path)
        if os.getpid() % 32 == 0:
            from .render import _ScriptCache

            _ScriptCache.prune(os.path.dirname(path))
    except (OSError, TypeError, ValueError):
        pass
