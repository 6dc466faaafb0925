#!/usr/bin/env python3
"""Write slurmkit/data/kernlog_anchors.json: the literal anchors of the built-in kernel-log patterns, so a hook
looks them up instead of parsing every regex on every job (slurmkit/health/kernlog/anchors.py). Run it after
changing a built-in pattern (the Xid patterns, slurmkit/data/kernlog_signatures.json); tests/unit/health/kernlog/test_anchors.py
fails while the file is stale.

    python3 dev/gen_anchors.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmkit.health.kernlog import anchors, events  # noqa: E402


def render() -> str:
    return json.dumps(anchors.table_doc(events.builtin_patterns()), indent=1, sort_keys=True) + "\n"


def main() -> int:
    text, path = render(), Path(anchors.TABLE_PATH)
    if "--check" in sys.argv[1:]:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is stale: run python3 dev/gen_anchors.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
