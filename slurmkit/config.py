"""Site config: YAML in, typed settings out (the loader; the schema is slurmkit/settings/).

The file is /etc/slurmkit/config.yaml unless `--config` or $SLURMKIT_CONFIG names another. A missing default file
means "all defaults"; a missing file that was asked for, a YAML syntax error, an unknown key, a wrong type or a
number outside its valid range is a UsageError (exit 2) naming the file, the line and the key, with the closest
valid key where there is one.

Input bounds: the file must be a regular file of at most CONFIG_LIMIT bytes (a FIFO, a device or a 50 MB file is
refused, via slurmkit/bounded.py; /dev/null reads as an empty config); the YAML's own bounds (nodes, keys,
nesting, digits) are slurmkit/typedyaml.py's, shared with the job spec. Each limit is named in its error.

The names of slurmkit/settings/ are re-exported here (`config.Settings`, `config.SyncSettings`, ...).
"""

from __future__ import annotations

import os

from . import bounded
from .errors import UsageError
from .settings import *  # noqa: F403 - the schema's names, re-exported: `from slurmkit import config` works
from .settings import DEFAULT_PATH, RangeError, Settings, TRIGGER_FORBIDDEN, _check_signal  # noqa: F401
from .typedyaml import MAX_DEPTH, MAX_INT_DIGITS, MAX_ITEMS, MAX_NODES, parse_yaml, prescan  # noqa: F401

CONFIG_LIMIT = 1 << 20  # bytes: a site config is a few KiB; 1 MiB is generous and parses in well under 1 s


def config_path(explicit: str | None = None) -> tuple[str, bool]:
    """The config path to use, and whether the user asked for it (then it must exist)."""
    if explicit:
        return explicit, True
    env = os.environ.get("SLURMKIT_CONFIG")
    if env:
        return env, True
    return DEFAULT_PATH, False


def load(explicit: str | None = None) -> Settings:
    path, required = config_path(explicit)
    if not os.path.lexists(path):
        if required:
            raise UsageError("config file not found", path=path)
        return Settings()
    if os.path.realpath(path) == os.devnull:  # the usual spelling of "no site config": all defaults
        return loads("", path)
    return loads_bytes(bounded.read_bytes(path, limit=CONFIG_LIMIT, what="config file"), path)


def loads_bytes(data: bytes, path: str) -> Settings:
    """The settings in a config file's bytes (UTF-8, or a UsageError naming `path`)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"cannot read config: not UTF-8 ({e})", path=path) from None
    return loads(text, path)


def loads(text: str, path: str = "<config>") -> Settings:
    s = parse_yaml(text, Settings, path)
    if s.overrides:  # per-node entries: each key checked like the same key at the top level
        from .settings import overrides

        overrides.check(s, lambda one: parse_yaml(one, Settings, path))
    return s
