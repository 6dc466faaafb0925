"""Multi-node checkpoints at DEST (issue 29): each node replicates its own part of a step; a step is complete at DEST
only when every part is there.

Layout at DEST (a filesystem path):

    DEST/slurmkit-parts.json        {"parts": N, "job": "1234"}: written first, by the first node (node rank 0)
    DEST/node-0/step-0000001200/    node 0's part (its node-local step directory, published by the sync engine)
    DEST/node-1/step-0000001200/    node 1's part ...

A step is COMPLETE at DEST when every `node-R` (R < N) holds it complete (valid manifest, every file with its
size). Readers (`durable_steps`, `restore`) treat anything less as absent: a resumed job never starts from a step
that only some nodes saved. Without `slurmkit-parts.json`, DEST is a single-node destination (checkpoints directly
under it).

Which step a node copies (`next_part_to_copy`, pure): node 0 its newest (skipping intermediates, as a single
node); every other node only the steps node 0 already published, newest first, so the parts meet on the same steps
even when each node's replicator skips intermediates.
"""

from __future__ import annotations

import json
import os
from typing import Any

PARTS_FILE = "slurmkit-parts.json"
MAX_PARTS = 100000


def part_dir(dest: str, rank: int) -> str:
    return os.path.join(dest, f"node-{int(rank)}")


def next_part_to_copy(local: dict[str, Any], done: dict[str, Any], leader_has: list[str]) -> str | None:
    """A follower node's next step: the newest step node 0 already holds at DEST that this node has complete
    locally and has not published, newer than what it published. Pure."""
    top = max(done) if done else ""
    cands = [n for n in leader_has if n in local and n not in done and n > top]
    return max(cands) if cands else None


def expected_parts(dest: str) -> int | None:
    """N from DEST's parts record; None when DEST is a single-node destination. ValueError when unreadable."""
    path = os.path.join(dest, PARTS_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(4096)
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        n = int(data["parts"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a parts record ({e})") from None
    if not 1 <= n <= MAX_PARTS:
        raise ValueError(f"{path}: parts={n} out of range 1..{MAX_PARTS}")
    return n


def record_parts(dest: str, parts: int, job: str | None) -> None:
    """Node 0, before its first copy: how many parts make a step complete (atomic; rewritten only if it differs)."""
    from ..files import atomic_write

    os.makedirs(dest, exist_ok=True)
    try:
        if expected_parts(dest) == parts:
            return
    except ValueError:
        pass
    atomic_write(os.path.join(dest, PARTS_FILE), json.dumps({"parts": parts, "job": job}) + "\n", fsync=True)


def complete_steps(per_part: list[set[str]]) -> list[str]:
    """The steps every part holds, oldest first. Pure."""
    if not per_part:
        return []
    common = set(per_part[0])
    for s in per_part[1:]:
        common &= s
    return sorted(common)


def durable_steps(dest: str) -> tuple[list[str], int | None]:
    """(complete step names at DEST oldest first, parts or None). A multi-node DEST counts only steps whose every
    part is there."""
    from .. import checkpoint

    n = expected_parts(dest)
    if n is None:
        return [os.path.basename(c.path) for c in checkpoint.complete(dest)], None
    per = [{os.path.basename(c.path) for c in checkpoint.complete(part_dir(dest, r))} for r in range(n)]
    return complete_steps(per), n
