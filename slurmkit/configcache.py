"""The CLI's site settings without PyYAML while the config file is unchanged.

`slurmkit nodes`, `audit`, `sync`, `submit` read the site config on every run; PyYAML's import and its pure-Python
composer are a good part of their start-up. The first run after a change parses the file as usual
(slurmkit/config.py: every check, every file:line error) and leaves the result as JSON in the user's cache; later
runs whose config file has the very same bytes (and the same real path, slurmkit version, install prefix and
schema files) rebuild the settings from that JSON with `settings.from_dict`, the same dataclasses and range checks.
Only a config that parsed is ever stored, so a bad one always fails with its file and line. An entry is used only
from a directory and file that belong to us and that no one else can write (settings name the binaries slurmkit
runs). Any doubt, and SLURMKIT_NO_CACHE=1: parse the YAML. Standard library only.

`safe_load` does the same for a YAML data file (the audit's cause table): yaml.safe_load's result, kept as JSON
while the text is the same (and only when JSON carries it exactly).
"""

from __future__ import annotations

import json
import os
import stat
import sys

from . import config
from .settings import Settings, from_dict, to_dict


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmkit", "settings")


def _ours(p: str, *, is_dir: bool) -> bool:
    try:
        st = os.lstat(p)
    except OSError:
        return False
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o022:
        return False
    return stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)


def _key(path: str, data: bytes, kind: str = "settings") -> str:
    try:  # the builtin module: hashlib pulls in OpenSSL, a few ms of start-up
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import sha256
    from . import __version__

    here = os.path.dirname(os.path.abspath(__file__))
    schema = [
        [st.st_size, st.st_mtime_ns] for st in (os.stat(os.path.join(here, f)) for f in ("settings.py", "config.py"))
    ]
    h = sha256(json.dumps([kind, __version__, sys.prefix, os.path.realpath(path), schema]).encode())
    h.update(b"\0" + data)
    return h.hexdigest()


def load(explicit: str | None = None) -> Settings:
    """config.load(explicit), from the cache when the config file's bytes were parsed before."""
    path, _ = config.config_path(explicit)
    if os.environ.get("SLURMKIT_NO_CACHE") or not os.path.lexists(path) or os.path.realpath(path) == os.devnull:
        return config.load(explicit)  # nothing to parse (or a missing file: config.load says so)
    try:
        data = config.bounded.read_bytes(path, limit=config.CONFIG_LIMIT, what="config file")
        text = data.decode("utf-8")
    except (config.UsageError, UnicodeDecodeError):
        return config.load(explicit)  # its own error, in its own words
    d = _cache_dir()
    entry = os.path.join(d, _key(path, data) + ".json")
    if _ours(d, is_dir=True) and _ours(entry, is_dir=False):
        try:
            with open(entry, encoding="utf-8") as f:
                doc = json.load(f)
            return from_dict(doc["settings"], source=path, lines=doc["lines"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            pass  # unreadable or from another schema: parse
    s = config.loads(text, path)  # the bytes hashed above, as config.load would read them
    _store(d, entry, s)
    return s


def safe_load(path: str, text: str):
    """yaml.safe_load(text) (the text of the file at `path`), from the cache when it was loaded before; its
    errors are PyYAML's own."""
    if os.environ.get("SLURMKIT_NO_CACHE"):
        import yaml

        return yaml.safe_load(text)
    d = _cache_dir()
    entry = os.path.join(d, _key(path, text.encode("utf-8", "surrogatepass"), "yaml") + ".json")
    if _ours(d, is_dir=True) and _ours(entry, is_dir=False):
        try:
            with open(entry, encoding="utf-8") as f:
                return json.load(f)["data"]
        except (OSError, ValueError, TypeError, KeyError):
            pass
    import yaml

    data = yaml.safe_load(text)
    try:
        doc = json.dumps({"data": data})
        if json.loads(doc)["data"] == data:  # only what JSON carries exactly (no dates, no tuples)
            _write(d, entry, doc)
    except (TypeError, ValueError):
        pass
    return data


def _store(d: str, entry: str, s: Settings) -> None:
    try:
        text = json.dumps({"settings": to_dict(s), "lines": s.lines})
        if from_dict(json.loads(text)["settings"], source=s.source, lines=s.lines) != s:
            return  # a value JSON does not carry exactly: never cached
    except (TypeError, ValueError):
        return
    _write(d, entry, text)


def _write(d: str, entry: str, text: str) -> None:
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        if not _ours(d, is_dir=True):
            return
        tmp = f"{entry}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, entry)
    except (OSError, TypeError, ValueError):
        pass
