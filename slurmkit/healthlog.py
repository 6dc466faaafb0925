"""The JSON-lines health log: every verdict a check reached, with its evidence, so `audit` can show it.

One record a line, appended with a single write (O_APPEND), so concurrent prologs on a shared log never interleave
within a record:

    {"time": "2026-11-30T09:16:01Z", "node": "n3", "context": "prolog", "job_id": 42, "check": "xid",
     "status": "fail", "reason": "slurmkit:xid79 GPU 0000:3b:00 fell off the bus", "evidence": {...},
     "action": "drained"}

`context` is prolog | epilog | check | sync; `status` ok | warn | fail | skip; `action` is what slurmkit did
(drained, requeued, none, skipped-admin-drain, ...). Extra keys are allowed; readers ignore what they don't know.
Light: the prolog imports this.
"""
from __future__ import annotations

import json
import os
import socket
from datetime import datetime, timezone
from typing import Iterator


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(*, check: str, status: str, reason: str = "", evidence: dict | None = None, context: str = "check",
           node: str | None = None, job_id: int | None = None, action: str | None = None, **extra) -> dict:
    rec = {"time": now_iso(), "node": node or os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
           "context": context, "job_id": job_id, "check": check, "status": status, "reason": reason,
           "evidence": evidence or {}, "action": action}
    rec.update(extra)
    return rec


def append(path: str, records: list[dict] | dict) -> None:
    """Append records; create the directory and file (0644) when missing."""
    if isinstance(records, dict):
        records = [records]
    if not records:
        return
    data = "".join(json.dumps(r, sort_keys=False, default=str) + "\n" for r in records).encode()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path: str, *, node: str | None = None, since: str | None = None) -> Iterator[dict]:
    """Records in file order; skips lines that are not JSON objects (a torn last line after a crash)."""
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            if node is not None and rec.get("node") != node:
                continue
            if since is not None and str(rec.get("time", "")) < since:
                continue
            yield rec
