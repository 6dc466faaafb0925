"""The JSON-lines health log: every verdict a check reached, with its evidence, so `audit` can show it.

One record a line:

    {"time": "2026-11-30T09:16:01Z", "node": "n3", "context": "prolog", "job_id": 42, "check": "xid",
     "status": "fail", "reason": "slurmkit:xid79 GPU 0000:3b:00 fell off the bus", "evidence": {...},
     "action": "drained"}

`context` is prolog | epilog | check | sync | health | efficiency (the idle policy); `status` ok | warn | fail |
skip; `action` is what slurmkit did (drained, requeued, none, skipped-admin-drain, ...). Extra keys are allowed;
readers ignore what they don't know.

Two layouts, chosen by `paths.health_log`:
- a directory (the default, `/var/log/slurmkit/health/`): one file per node, `<node>.jsonl`, appended only by that
  node, so no two writers ever share a file (on NFS, O_APPEND is not atomic across clients: two nodes appending to
  one file at once can overwrite each other's records). Each file is rotated by size (`<node>.jsonl.1` ... `.N`).
  Readers open only the nodes they need and read from the end backwards, stopping at `since`.
- a single file (a path ending in `.jsonl`, `.json` or `.log`, or an existing file): the first layout, still read
  and written for sites that have one. Safe only when every writer is on one host (see docs). Rotated by size as
  a node's file is (`<file>.1` ... `.N`), its generations read oldest first.
The job-efficiency log (efficiency/record.py) is written and read through this module too, in the same two layouts.
Light: the prolog imports this (standard library only; the pipeline sinks import what they need when enabled).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .files import rotate
from .nodeconf import safe_node_name
from .times import parse_utc_iso, utc_iso

if TYPE_CHECKING:
    from .settings import Settings

SINGLE_FILE_SUFFIXES = (".jsonl", ".json", ".log")
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_GENERATIONS = 5
SINCE_SLACK_SECONDS = 600  # a node clock that stepped back: keep reading this far past `since`
_BLOCK = 64 * 1024


def now_iso() -> str:
    return utc_iso()


def record(
    *,
    check: str,
    status: str,
    reason: str = "",
    evidence: dict | None = None,
    context: str = "check",
    node: str | None = None,
    job_id: int | None = None,
    action: str | None = None,
    **extra,
) -> dict:
    rec = {
        "time": now_iso(),
        "node": node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename,
        "context": context,
        "job_id": job_id,
        "check": check,
        "status": status,
        "reason": reason,
        "evidence": evidence or {},
        "action": action,
    }
    rec.update(extra)
    return rec


# -- layout ---------------------------------------------------------------------------------------------------------
def per_node(path: str) -> bool:
    """True when `path` names a per-node log directory, False for the single-file layout. One stat, not an
    isdir then an exists: a directory another node's hook is making between the two read as a file."""
    if path.endswith(os.sep):
        return True
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        return not path.lower().endswith(SINGLE_FILE_SUFFIXES)


def node_file(directory: str, node: str) -> str:
    """`<dir>/<node>.jsonl`; a node name that could escape the directory is refused (it comes from Slurm or the
    hostname, but a record's `node` is data)."""
    if not safe_node_name(node):
        raise ValueError(f"node name {node!r} cannot name a health-log file")
    return os.path.join(directory, f"{node}.jsonl")


def newest_first(directory: str, node: str) -> Iterator[str]:
    """The node's files, newest first: `<node>.jsonl`, `.1`, `.2`, ... (rotation keeps them numbered without a gap),
    found by probing each name, never by listing a directory that holds every node of the cluster."""
    return _generations(node_file(directory, node))


def _generations(base: str) -> Iterator[str]:
    """A log file's generations, newest first: `base`, `base.1`, `base.2`, ..."""
    if os.path.exists(base):
        yield base
    i = 1
    while os.path.exists(f"{base}.{i}"):
        yield f"{base}.{i}"
        i += 1


def generations(directory: str, node: str) -> list[str]:
    """The node's files, oldest first."""
    return list(reversed(list(newest_first(directory, node))))


def log_nodes(directory: str) -> list[str]:
    """Every node with a file in a per-node log directory."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = set()
    for name in names:
        stem, sep, rest = name.partition(".jsonl")
        if sep and (rest == "" or (rest[1:].isdigit() and rest.startswith("."))) and safe_node_name(stem):
            out.add(stem)
    return sorted(out)


# -- writing --------------------------------------------------------------------------------------------------------
def _encode(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=False, default=str) + "\n" for r in records).encode()


def _append_fd(path: str, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:  # one write in practice; a short write is finished, not dropped
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def _ends_with_newline(path: str) -> bool:
    """False after a torn last line (a writer died mid-record): the next record then starts on a line of its own
    instead of being glued to the torn one and lost with it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"
    finally:
        os.close(fd)


def append_node(
    directory: str,
    node: str,
    records: list[dict],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    keep: int = DEFAULT_GENERATIONS,
) -> str:
    """Append to the node's own file, rotating first when it would grow past `max_bytes`. Rotation and append
    run under an flock on `<dir>/.<node>.lock`, so a prolog and an epilog of the same node never race."""
    base = node_file(directory, node)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    _append_rotating(base, os.path.join(directory, f".{node}.lock"), _encode(records), max_bytes, keep)
    return base


def _append_rotating(base: str, lock_path: str, data: bytes, max_bytes: int, keep: int) -> None:
    """Append `data` to `base` under an flock on `lock_path`, rotating `base` first (`keep` generations) when it
    would grow past `max_bytes`; a torn last line is ended first."""
    import fcntl

    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            size = os.lstat(base).st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(data) > max_bytes:
            rotate(base, keep)
            size = 0
        _append_fd(base, data if not size or _ends_with_newline(base) else b"\n" + data)
    finally:
        os.close(lock)


def append(
    path: str, records: list[dict] | dict, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_GENERATIONS
) -> None:
    """Append records to the log at `path` in its layout (directories are made when missing, files are 0644)."""
    if isinstance(records, dict):
        records = [records]
    if not records:
        return
    if not per_node(path):
        parent, name = os.path.split(path)
        os.makedirs(parent or ".", exist_ok=True)
        _append_rotating(path, os.path.join(parent, f".{name}.lock"), _encode(records), max_bytes, keep)
        return
    by_node: dict[str, list[dict]] = {}
    for r in records:
        by_node.setdefault(str(r.get("node") or os.uname().nodename), []).append(r)
    for node, recs in by_node.items():
        append_node(path, node, recs, max_bytes=max_bytes, keep=keep)


def write(settings: Settings, records: list[dict] | dict) -> None:
    """Append records to the configured health log and feed the site's pipelines (syslog/journald, the
    Prometheus textfile) when the config turns them on. A sink that fails never loses the log record: the log is
    written first; a log that cannot be written (read-only, full) still feeds the pipelines, then raises its
    OSError for the caller to say loudly (logsinks.alert)."""
    if isinstance(records, dict):
        records = [records]
    if not records:
        return
    h = settings.health
    lost: OSError | None = None
    try:
        append(
            settings.paths.health_log, records, max_bytes=h.log_max_bytes or DEFAULT_MAX_BYTES, keep=h.log_generations
        )
    except OSError as e:  # the pipelines still get the records; the caller hears of the loss (and says it)
        lost = e
    if h.syslog:
        from . import logsinks

        logsinks.to_syslog(records)
    textfile_dir = h.textfile_dir
    if textfile_dir:
        from . import logsinks

        logsinks.to_textfile(textfile_dir, records, state_dir=settings.paths.state_dir)
    if lost is not None:
        raise lost


# -- reading --------------------------------------------------------------------------------------------------------
def _parse(line: str | bytes) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def _lines_backwards(path: str) -> Iterator[bytes]:
    """The complete lines of a file, last first, read in blocks from the end (a torn last line is yielded too:
    the JSON parse drops it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        pos = os.fstat(fd).st_size
        rest = b""
        while pos > 0:
            n = min(_BLOCK, pos)
            pos -= n
            os.lseek(fd, pos, os.SEEK_SET)
            buf = os.read(fd, n) + rest
            parts = buf.split(b"\n")
            rest = parts[0]
            for line in reversed(parts[1:]):
                if line:
                    yield line
        if rest:
            yield rest
    finally:
        os.close(fd)


def _iso_minus(since: str, seconds: int) -> str:
    try:
        return utc_iso(parse_utc_iso(since) - seconds)
    except ValueError:
        return since


def read_node(directory: str, node: str, *, since: str | None = None) -> list[dict]:
    """One node's records in file order, from its rotated generations; with `since`, read from the newest
    record backwards and stop once records are older than `since` (less a slack for clock steps): the cost is
    what is shown, not the log's age."""
    stop = _iso_minus(since, SINCE_SLACK_SECONDS) if since is not None else None
    recs: list[dict] = []  # newest first while reading
    for path in newest_first(directory, node):
        for line in _lines_backwards(path):
            rec = _parse(line)
            if rec is None:
                continue
            if stop is not None and since is not None:
                t = str(rec.get("time", ""))
                if t and t < stop:
                    recs.reverse()
                    return [r for r in recs if str(r.get("time", "")) >= since]
            recs.append(rec)
    recs.reverse()
    return recs if since is None else [r for r in recs if str(r.get("time", "")) >= since]


def read(
    path: str, *, node: str | None = None, nodes: Iterable[str] | None = None, since: str | None = None
) -> Iterator[dict]:
    """Records of one node, of `nodes`, or of all; per node in file order. Lines that are not JSON objects (a torn
    last line after a crash) are skipped. In the per-node layout only the named nodes' files are opened."""
    want = None
    if node is not None:
        want = {node}
    elif nodes is not None:
        want = set(nodes)
    rec: dict | None
    if per_node(path):
        names = sorted(want) if want is not None else log_nodes(path)
        for n in names:
            try:
                recs = read_node(path, n, since=since)
            except ValueError:  # a name that cannot be a file has no records
                continue
            for rec in recs:
                if rec.get("node", n) == n:
                    yield rec
        return
    for p in reversed(list(_generations(path))):  # the single file's generations, oldest first
        try:
            f = open(p, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        with f:
            for line in f:
                rec = _parse(line)
                if rec is None:
                    continue
                if want is not None and rec.get("node") not in want:
                    continue
                if since is not None and str(rec.get("time", "")) < since:
                    continue
                yield rec


def read_bounded(path: str, bounds: dict[str, str | None]) -> dict[str, list[dict]]:
    """Records of each node in `bounds`, each from its own lower time bound (None: all of it), in file order.
    The per-node layout opens only those nodes' files and reads each from its end back to its bound; the single
    file is read once."""
    out: dict[str, list[dict]] = {n: [] for n in bounds}
    if per_node(path):
        for n, since in bounds.items():
            try:
                out[n] = [r for r in read_node(path, n, since=since) if r.get("node", n) == n]
            except ValueError:
                pass
        return out
    for rec in read(path, nodes=bounds):
        node = rec.get("node")
        if not isinstance(node, str):
            continue
        since = bounds.get(node)
        if since is None or str(rec.get("time", "")) >= since:
            out[node].append(rec)
    return out
