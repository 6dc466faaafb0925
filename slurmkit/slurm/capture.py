"""Captured node output of any common kind, for `audit --from-file`: pure parsers, one picked by the text.

`scontrol show node` (multi-line blocks), `scontrol -o show node`, `sinfo --json`, and the sinfo text layouts
admins paste into tickets: default `sinfo`, `sinfo -N -l`, `sinfo -R` (default, or `-o '%N|%u|%H|%E'`),
`sinfo --list-reasons --Format=reason:N,nodelist`, `sinfo -N -h -o '%N %t %G'`, `sinfo -O GresUsed,NodeList`.
`parse_node_capture` raises NodeCaptureError(message, line) when the text holds no node records it can read.
"""

from __future__ import annotations

import re

from ..errors import ParseError
from .records import (
    STATE_WORDS,
    SUFFIX_FLAGS,
    NodeRecord,
    gres_gpu_count,
    node_from_kv,
    parse_kv_line,
    parse_reason,
    parse_state,
)


class NodeCaptureError(ParseError):
    """Text that holds no node records slurmkit can read; `line` is where, when known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message, line=line)


_TS_RE = re.compile(r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None)$")
_SINFO_R_LINE_RE = re.compile(
    r"^(?P<reason>.*?\S)\s+(?P<user>\S+)\s+(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown)\s+(?P<nodes>\S+)\s*$"
)


def parse_scontrol_nodes(text: str) -> list[NodeRecord]:
    """`scontrol show node` in either layout: multi-line blocks (each starting `NodeName=`) or one node per line
    (`-o`). Lines are parsed one at a time, so a value never runs into the next line (OS=... with trailing spaces,
    a pasted line with garbage in it); `Reason=` runs to the end of its line."""
    return [node_from_kv(kv) for kv in _scontrol_blocks(text)]


def _scontrol_blocks(text: str):
    cur: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("NodeName="):
            if cur is not None:
                yield cur
            cur = parse_kv_line(line)
        elif cur is not None and line.strip():
            kv = parse_kv_line(line.strip())
            if kv:
                cur.update(kv)
    if cur is not None:
        yield cur


def _expand(expr: str) -> list[str]:
    from . import expand_hostlist

    return expand_hostlist(expr)


def _merge(out: dict[str, NodeRecord], rec: NodeRecord) -> None:
    """Rows about the same node (one per partition, or a duplicate row) become one record."""
    old = out.get(rec.name)
    if old is None:
        out[rec.name] = rec
        return
    for p in rec.partitions:
        if p not in old.partitions:
            old.partitions.append(p)
    if old.state == "UNKNOWN" and rec.state != "UNKNOWN":
        old.state, old.flags = rec.state, rec.flags
    if not old.reason and rec.reason:
        old.reason, old.reason_user, old.reason_time = rec.reason, rec.reason_user, rec.reason_time
    if not old.gres and rec.gres:
        old.gres, old.gpus_total = rec.gres, rec.gpus_total
    if not old.gres_used and rec.gres_used:
        old.gres_used, old.gpus_used = rec.gres_used, rec.gpus_used


def _state_like(word: str) -> bool:
    w = word.rstrip("".join(SUFFIX_FLAGS)).lower()
    return (
        w in STATE_WORDS
        or w.upper() in {"IDLE", "MIXED", "ALLOCATED", "DOWN", "UNKNOWN", "FUTURE"}
        or ("+" in word and w.split("+")[0] in STATE_WORDS)
    )


def _sinfo_row_record(cols: dict[str, str]) -> list[NodeRecord]:
    nodes = cols.get("NODELIST") or cols.get("HOSTNAMES") or ""
    if not nodes or nodes in ("n/a",):
        return []
    st = cols.get("STATE", "")
    state, flags = parse_state(st) if st and st != "n/a" else ("UNKNOWN", [])
    reason, user, when = parse_reason(cols.get("REASON", ""))
    if cols.get("USER") and reason:
        user = cols["USER"] if cols["USER"] not in ("Unknown", "(null)") else user
    if cols.get("TIMESTAMP") and reason:
        when = cols["TIMESTAMP"] if cols["TIMESTAMP"] not in ("Unknown", "None") else when
    gres = cols.get("GRES", "")
    gres = "" if gres in ("(null)", "N/A") else gres
    used = cols.get("GRES_USED", "")
    part = cols.get("PARTITION", "").rstrip("*")
    out = []
    for name in _expand(nodes):
        out.append(
            NodeRecord(
                name=name,
                state=state,
                flags=list(flags),
                reason=reason,
                reason_user=user,
                reason_time=when,
                gres=gres,
                gres_used=used,
                gpus_total=gres_gpu_count(gres),
                gpus_used=gres_gpu_count(used),
                partitions=[part] if part else [],
            )
        )
    return out


# header words of the sinfo text layouts we read; a column named here is one token unless it is REASON
_SINFO_HEADER_WORDS = {
    "PARTITION",
    "AVAIL",
    "TIMELIMIT",
    "NODES",
    "STATE",
    "NODELIST",
    "HOSTNAMES",
    "REASON",
    "USER",
    "TIMESTAMP",
    "CPUS",
    "S:C:T",
    "MEMORY",
    "TMP_DISK",
    "WEIGHT",
    "AVAIL_FE",
    "GRES",
    "GRES_USED",
    "NODES(A/I/O/T)",
    "CPUS(A/I/O/T)",
    "FEATURES",
    "ACTIVE_FEATURES",
}
_SINFO_DEFAULT_COLUMNS = ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
_AVAIL_WORDS = {"up", "down", "drain", "inact", "n/a"}
_PIPE_FORMATS = {  # headerless `sinfo -h -o` pipe layouts, told apart by their columns
    "reasons": ["NODELIST", "USER", "TIMESTAMP", "REASON"],  # sinfo -R -h -o '%N|%u|%H|%E'
    "states": ["NODELIST", "STATE", "GRES", "REASON"],  # sinfo -h -N -o '%N|%T|%G|%E'
}


def _split_columns(line: str, header: list[str]) -> dict[str, str] | None:
    """Whitespace columns; a REASON column (may hold spaces) takes what the others leave, as printed."""
    toks = [(m.start(), m.end()) for m in re.finditer(r"\S+", line)]
    n = len(header)
    if "REASON" not in header:
        if len(toks) < n - 1:
            return None
        vals = [line[a:b] for a, b in toks[:n]]
        return dict(zip(header, vals + [""] * (n - len(vals))))
    i = header.index("REASON")
    after = n - 1 - i
    if len(toks) < n:
        return None
    left = [line[a:b] for a, b in toks[:i]]
    right = [line[a:b] for a, b in toks[len(toks) - after :]] if after else []
    mid = toks[i : len(toks) - after]
    reason = line[mid[0][0] : mid[-1][1]] if mid else ""
    return dict(zip(header, left + [reason] + right))


def parse_sinfo_text(text: str) -> list[NodeRecord]:
    """sinfo text output in the layouts above (headers tell them apart; several outputs may follow each other)."""
    out: dict[str, NodeRecord] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if "|" in s:
            cols = s.split("|")
            if all(c.strip().upper() == c.strip() and c.strip() in _SINFO_HEADER_WORDS for c in cols if c.strip()):
                header = [c.strip() for c in cols] + ["|"]  # a pipe header: remember the columns
                continue
            if header and header[-1] == "|":
                names = header[:-1]
            elif len(cols) >= 3 and _TS_RE.match(cols[2].strip()):
                names = _PIPE_FORMATS["reasons"]
            elif len(cols) >= 2 and _state_like(cols[1].strip()):
                names = _PIPE_FORMATS["states"]
            else:
                continue
            row = dict(zip(names, [c.strip() for c in cols[: len(names) - 1]] + ["|".join(cols[len(names) - 1 :])]))
            for rec in _sinfo_row_record(row):
                _merge(out, rec)
            continue
        words = s.split()
        if words and all(w in _SINFO_HEADER_WORDS for w in words):
            header = words
            continue
        if header is None or header[-1] == "|":
            m = _SINFO_R_LINE_RE.match(s)
            if m:  # `sinfo -R` data row without its header (column padding collapsed)
                row = {"REASON": m["reason"], "USER": m["user"], "TIMESTAMP": m["time"], "NODELIST": m["nodes"]}
            elif (
                len(words) == 6
                and words[1].lower().rstrip("*") in _AVAIL_WORDS
                and words[3].isdigit()
                and _state_like(words[4])
            ):  # default `sinfo` without its header: the hostlist, not the count
                row = dict(zip(_SINFO_DEFAULT_COLUMNS, words))
            elif len(words) == 3 and words[0].isdigit() and _state_like(words[1]):  # NODES STATE NODELIST
                row = {"NODES": words[0], "STATE": words[1], "NODELIST": words[2]}
            elif len(words) >= 2 and _state_like(words[1]):  # `sinfo -N -h -o '%N %t %G'`
                row = {"NODELIST": words[0], "STATE": words[1], "GRES": words[2] if len(words) > 2 else ""}
            else:
                continue
        elif "NODES(A/I/O/T)" in header:
            continue  # `sinfo -s`: per-partition counts, nothing per node
        else:
            split = _split_columns(line, header)
            if split is None:
                continue
            row = split
        for rec in _sinfo_row_record(row):
            _merge(out, rec)
    return list(out.values())


def parse_node_capture(text: str, source: str = "captured file") -> tuple[str, list[NodeRecord]]:
    """Any captured node listing -> (kind, records). Raises NodeCaptureError with a line number when the text is
    not node output we can read (a Slurm error message, a slurmd log, grep output without node names)."""
    text = text.lstrip("\ufeff")
    lines = text.splitlines()
    first = next(((i + 1, ln) for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise NodeCaptureError("empty file: expected scontrol show node, sinfo --json or sinfo output")
    lineno, head = first
    if head.lstrip().startswith("{"):
        from .slurm_json import SlurmFormatError, parse_nodes_json

        try:
            return parse_nodes_json(text, source)
        except SlurmFormatError as e:
            raise NodeCaptureError(str(e), lineno) from None
    if any(ln.startswith("NodeName=") for ln in lines):
        multi = any(ln.startswith((" ", "\t")) and "=" in ln for ln in lines)
        return ("scontrol" if multi else "scontrol-oneliner"), parse_scontrol_nodes(text)
    m = re.search(r"(slurm_\w+ error|error):\s*(.*)$", head)
    if m and not _SINFO_R_LINE_RE.match(head.strip()):
        if re.match(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ \S+?(\[\d+\])?:", head):
            raise NodeCaptureError(
                f"this is a syslog/slurmd log, not node output; read it on the node ({head.strip()[:120]})", lineno
            )
        raise NodeCaptureError(f"this is a Slurm error message, not node output: {head.strip()}", lineno)
    if re.match(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ \S+?(\[\d+\])?:", head):
        raise NodeCaptureError(f"this is a syslog/slurmd log, not node output ({head.strip()[:120]})", lineno)
    if re.match(r"^\s+[A-Z][A-Za-z]+=", head):
        raise NodeCaptureError(
            "scontrol output without its NodeName= lines (filtered through grep?): "
            "capture the whole `scontrol show node` output",
            lineno,
        )
    recs = parse_sinfo_text(text)
    if not recs:
        raise NodeCaptureError(
            "no node records found: expected `scontrol show node`, `scontrol -o show node`, "
            "`sinfo --json`, or sinfo text output (`sinfo`, `sinfo -R`, `sinfo -N -l`)",
            lineno,
        )
    return "sinfo", recs
