"""The hooks' settings without YAML on the hot path.

Parsing the site config needs PyYAML (~10 ms to import and parse, on every job, twice). The first hook after a
config change parses it as usual and leaves the result as JSON in a root-only directory; the next hooks read that
JSON while the config file is unchanged (same path, inode, size, mtime, slurmkit version). The cache is only
trusted when its directory is 0700 and it and its file belong to us: a root hook never reads settings (which name
the binaries it runs) from a file someone else could have written. Any doubt: parse the YAML.

The cache holds plain data; `settings.from_dict` rebuilds the real dataclasses from it (the same type, and the
same range checks, as the YAML loader's), so a hook's `settings` is a `slurmkit.settings.Settings` either way.
This module imports slurmkit.settings (standard library only), never PyYAML, unless it has to parse.
"""

from __future__ import annotations

import json
import os
import stat

from ..settings import DEFAULT_PATH, Settings, from_dict, to_dict
from ..files import atomic_write

CACHE_DIR: str | None = None  # an override (tests); else $SLURMKIT_HOOK_CACHE_DIR or /run/slurmkit, read at each load


def cache_dir() -> str:
    """Read when used, not at import: the hook agent's children run hooks with environments of their own."""
    return CACHE_DIR or os.environ.get("SLURMKIT_HOOK_CACHE_DIR") or "/run/slurmkit"


def _key(path: str, st: os.stat_result) -> dict:
    from .. import __version__

    # the schema is part of the key: a slurmkit with new settings must not be served an older cache
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "settings")
    # every module of the schema, so a section added in a new file (overrides.py came so) changes the key too
    schema = [os.stat(os.path.join(here, f)) for f in sorted(os.listdir(here)) if f.endswith(".py")]
    return {
        "path": os.path.abspath(path),
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "version": __version__,
        "schema": [[st.st_size, st.st_mtime_ns] for st in schema],
    }


def _cache_file(path: str, d: str) -> str:
    # the config's path spelled into the name (no hashlib: ~2 ms of import on every job)
    return os.path.join(d, "settings" + os.path.abspath(path).replace("%", "%25").replace("/", "%2F") + ".json")


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


def load() -> Settings:
    """Settings for a hook: from the cache when the config is unchanged, else parsed (and cached)."""
    path = os.environ.get("SLURMKIT_CONFIG") or DEFAULT_PATH  # as config.config_path()
    try:
        st = os.stat(path)
    except OSError:
        from .. import config

        return config.load()  # missing file: config.load says what is wrong (or gives the defaults)
    key = _key(path, st)
    d = cache_dir()
    cf = _cache_file(path, d)
    if _trusted(d, is_dir=True) and _trusted(cf, is_dir=False):
        try:
            with open(cf, encoding="utf-8") as f:
                doc = json.load(f)
            if doc.get("key") == key:
                return from_dict(doc["settings"], source=path, lines=doc.get("lines", {}))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            pass
    from .. import config

    s = config.load()
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        if _trusted(d, is_dir=True):
            atomic_write(cf, json.dumps({"key": key, "settings": to_dict(s), "lines": s.lines}), mode=0o600)
    except OSError:
        pass
    return s
