"""A node's settings as JSON beside its site config, written by `slurmkit install` from the one loader.

The hooks run on every job; parsing the YAML costs PyYAML's import and the typed loader on each. `install` parses
each node's config once (config.loads: the same errors as anywhere) and writes `<config>.settings.json` beside it:
the settings as plain data, stamped with the sha256 of the YAML bytes they came from. A hook reads the YAML's bytes
(small, bounded), and uses the JSON only when its stamp is that sha256 and the file could only have been written by
root or the running user (files.read_trusted: owner, mode, no link, a directory others cannot change); anything
else (missing, stale after an edit by hand, planted, writable by others, not JSON, a schema it does not match)
means the YAML is parsed as usual. No cache is written by a hook: install writes this file, nothing else does.
"""

from __future__ import annotations

import hashlib
import json
import os

from . import bounded, config, files
from .settings import DEFAULT_PATH, Settings, from_dict, to_dict

FORMAT = 1


def settings_path(config_path: str) -> str:
    """The settings file of the site config at `config_path`: /etc/slurmkit/config.yaml -> config.settings.json."""
    return os.path.splitext(config_path)[0] + ".settings.json"


def render(yaml_bytes: bytes, config_path: str) -> bytes:
    """The settings file for this YAML (a UsageError naming `config_path` and the line when it does not load)."""
    s = config.loads_bytes(yaml_bytes, config_path)
    doc = {"format": FORMAT, "sha256": hashlib.sha256(yaml_bytes).hexdigest(), "settings": to_dict(s)}
    doc["lines"] = s.lines
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def load() -> Settings:
    """The settings a hook runs with: from the settings file when its stamp matches the YAML, else parsed."""
    path = os.environ.get("SLURMKIT_CONFIG") or DEFAULT_PATH  # as config.config_path()
    if not os.path.lexists(path) or os.path.realpath(path) == os.devnull:
        return config.load()  # the defaults, or config.load's error for a file that was asked for
    data = bounded.read_bytes(path, limit=config.CONFIG_LIMIT, what="config file")
    found = _from_file(settings_path(path), hashlib.sha256(data).hexdigest(), path)
    return found if found is not None else config.loads_bytes(data, path)


def _from_file(sp: str, digest: str, path: str) -> Settings | None:
    raw = files.read_trusted(sp, config.CONFIG_LIMIT * 4)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT or doc.get("sha256") != digest:
            return None  # stale: the YAML was changed after install
        return from_dict(doc["settings"], source=path, lines=doc.get("lines", {}))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # not ours, or a schema this slurmkit does not match: parse the YAML
