"""The hooks' settings without YAML on the hot path.

Parsing the site config needs PyYAML (~10 ms to import and parse, on every job, twice). The first hook after a
config change parses it as usual and leaves the result as JSON in a root-only directory; the next hooks read that
JSON while the config file is unchanged (same path, inode, size, mtime, slurmkit version). The cache is only
trusted when its directory is 0700 and it and its file belong to us: a root hook never reads settings (which name
the binaries it runs) from a file someone else could have written. Any doubt: parse the YAML.
"""
from __future__ import annotations

import dataclasses
import json
import os
import stat

CACHE_DIR = os.environ.get("SLURMKIT_HOOK_CACHE_DIR", "/run/slurmkit")


def _key(path: str, st: os.stat_result) -> dict:
    from .. import __version__
    # the schema is part of the key: a slurmkit with new settings must not be served an older cache
    schema = os.stat(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config.py"))
    return {"path": os.path.abspath(path), "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "version": __version__, "schema": [schema.st_size, schema.st_mtime_ns]}


class _Section:
    """Read-only attribute access over a cached settings section (no dataclass machinery on the hot path)."""

    def __init__(self, data: dict):
        for k, v in data.items():
            object.__setattr__(self, k, v)

    def __repr__(self):
        return f"Section({vars(self)!r})"


def _sections(data: dict, sections: list[str]):
    top = _Section({k: (_Section(v) if k in sections else v) for k, v in data.items()})
    return top


def _cache_file(path: str) -> str:
    # the config's path spelled into the name (no hashlib: ~2 ms of import on every job)
    return os.path.join(CACHE_DIR, "settings" + os.path.abspath(path).replace("%", "%25").replace("/", "%2F")
                        + ".json")


def _trusted(p: str, *, is_dir: bool) -> bool:
    try:
        st = os.lstat(p)
    except OSError:
        return False
    if st.st_uid != os.geteuid():
        return False
    if is_dir:
        return stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077 == 0
    return stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o022 == 0




def load():
    """Settings for a hook: from the cache when the config is unchanged, else parsed (and cached)."""
    path = os.environ.get("SLURMKIT_CONFIG") or "/etc/slurmkit/config.yaml"   # as config.config_path()
    try:
        st = os.stat(path)
    except OSError:
        from .. import config
        return config.load()          # missing file: config.load says what is wrong (or gives the defaults)
    key = _key(path, st)
    cf = _cache_file(path)
    if _trusted(CACHE_DIR, is_dir=True) and _trusted(cf, is_dir=False):
        try:
            with open(cf, encoding="utf-8") as f:
                doc = json.load(f)
            if doc.get("key") == key:
                s = _sections(doc["settings"], doc["sections"])
                s.source = path
                s.lines = doc.get("lines", {})
                return s
        except (OSError, ValueError, TypeError, KeyError):
            pass
    from .. import config
    s = config.load()
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        if _trusted(CACHE_DIR, is_dir=True):
            data = {f.name: dataclasses.asdict(getattr(s, f.name)) if dataclasses.is_dataclass(getattr(s, f.name))
                    else getattr(s, f.name) for f in dataclasses.fields(s) if not f.metadata.get("internal")}
            tmp = f"{cf}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                sections = [k for k in data if dataclasses.is_dataclass(getattr(s, k))]
                json.dump({"key": key, "settings": data, "sections": sections, "lines": s.lines}, f)
            os.replace(tmp, cf)
    except OSError:
        pass
    return s
