"""Human tables and stable JSON for every reporting command."""
from __future__ import annotations

import json
import sys


def emit_json(obj, stream=None) -> None:
    stream = stream or sys.stdout
    json.dump(obj, stream, indent=2, sort_keys=False, default=str)
    stream.write("\n")


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A plain left-aligned table; the last column is not padded (reasons can be long)."""
    cells = [headers, *[[("" if c is None else str(c)) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
