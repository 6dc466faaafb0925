"""A rollback that sticks: `install --rollback` leaves a mark on the node (`rolled-back.json` beside the version
stamp: what it went back to, from what), and a later install that would change the node is refused there until the
admin moves forward on purpose (`install --forward`, which clears the mark once the node is installed). Without it
the next config-only install would silently put back everything the rollback took away.
"""

from __future__ import annotations

import json
import posixpath
import secrets

from .layout import Layout
from .ssh import NodeError

NAME = "rolled-back.json"


class Held(NodeError):
    """The node was rolled back; this install would change it, and --forward was not given."""


def path(lay: Layout) -> str:
    return posixpath.join(posixpath.dirname(lay.stamp), NAME)


def text(target: dict, current: dict | None) -> bytes:
    doc = {
        "to": {"slurmkit_version": target.get("slurmkit_version"), "bundle": target.get("bundle")},
        "from": {"slurmkit_version": (current or {}).get("slurmkit_version"), "bundle": (current or {}).get("bundle")},
    }
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def parse(data: bytes | None) -> dict | None:
    if data is None:
        return None
    try:
        doc = json.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return {"to": {}, "from": {}}  # a mark we cannot read is still a mark: hold, and say so
    return doc if isinstance(doc, dict) else {"to": {}, "from": {}}


def refusal(mark: dict) -> str:
    to, frm = mark.get("to") or {}, mark.get("from") or {}
    return (
        f"held: rolled back to slurmkit {to.get('slurmkit_version', '?')} (bundle {to.get('bundle', '?')}) from "
        f"{frm.get('slurmkit_version', '?')} (bundle {frm.get('bundle', '?')}); this install would change the node "
        "again. Rerun with --forward to move it forward on purpose"
    )


def write(t, lay: Layout, data: bytes) -> None:
    """The mark, written atomically (a temporary name renamed over any older mark)."""
    p = path(lay)
    tmp = posixpath.join(posixpath.dirname(p), f".{NAME}.slurmkit-tmp-{secrets.token_hex(4)}")
    t.put(data, tmp, 0o644)
    t.rename(tmp, p)


def clear(t, lay: Layout) -> None:
    t.run(["rm", "-f", "--", path(lay)]).check()
