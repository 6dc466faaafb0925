"""Human tables and stable JSON for every reporting command."""

from __future__ import annotations

import json
import math
import re
import sys

# C0 and C1 controls, DEL: a drain reason or a captured line holding ESC [ ... would drive the admin's terminal
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text) -> str:
    """`text` with every control character written as an escape (\\x1b, \\n): safe to print to a terminal or
    a CSV cell, one line, nothing hidden."""
    s = "" if text is None else str(text)
    return _CONTROL.sub(lambda m: {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(m.group(), f"\\x{ord(m.group()):02x}"), s)


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def emit_json(obj, stream=None) -> None:
    """JSON other tools can read: never NaN or Infinity (not JSON; a non-finite number is written as null)."""
    stream = stream or sys.stdout
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, default=str, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), indent=2, sort_keys=False, default=str, allow_nan=False)
    stream.write(text)
    stream.write("\n")


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A plain left-aligned table; the last column is not padded (reasons can be long)."""
    cells = [headers, *[[printable(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
