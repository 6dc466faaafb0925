"""Feed the site's pipelines with every health-log record: journald (structured fields) or syslog, and a
Prometheus textfile for node_exporter's textfile collector. Imported only when the config turns a sink on.

journald fields (the convention NHC follows: one field per fact, so `journalctl SLURMKIT_STATUS=fail` works):
    MESSAGE, PRIORITY, SYSLOG_IDENTIFIER=slurmkit, SLURMKIT_NODE, SLURMKIT_CONTEXT, SLURMKIT_JOB_ID, SLURMKIT_CHECK,
    SLURMKIT_STATUS, SLURMKIT_REASON, SLURMKIT_ACTION
Without journald's socket, the same facts go to syslog (facility daemon) as one `key=value` line.

`alert(message)`: what an admin must hear of every time, whatever the config (a hook agent that did not answer,
a health log that cannot be written): on stderr, in slurmd's own log file and in syslog.

The textfile (`<textfile_dir>/slurmkit-<node>.prom`, written to a temporary file and renamed into place) is a stable
interface, documented in docs/metrics.md:
    slurmkit_check_status{check}                  0 ok, 1 warn, 2 fail, -1 skip: the check's latest verdict
    slurmkit_check_timestamp_seconds{check}       when the check last reported (Unix time)
    slurmkit_records_total{check,status}          records written by this node since its state was created
    slurmkit_drained{cause}                       1 while a slurmkit drain of this node for `cause` stands
    slurmkit_job_gpu_idle_hours_total             idle GPU-hours of the jobs that ran on this node
The exposition format is written here rather than through prometheus-client: that library costs ~60 ms to import,
more than the whole prolog, and this runs in every hook. The tests parse the file with prometheus-client's parser.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from .files import atomic_write
from .times import parse_utc_iso

JOURNAL_SOCKET = "/run/systemd/journal/socket"
SYSLOG_SOCKET = "/dev/log"  # SLURMKIT_SYSLOG_SOCKET names another (a test's, a container's)
_PRIORITY = {"fail": 3, "warn": 4, "ok": 6, "skip": 5}  # err, warning, info, notice
STATUS_VALUE = {"ok": 0, "warn": 1, "fail": 2, "skip": -1}


# -- journald / syslog ------------------------------------------------------------------------------------------------
def journal_fields(rec: dict) -> list[tuple[str, str]]:
    fields = [
        ("MESSAGE", f"{rec.get('check')} {rec.get('status')}: {rec.get('reason') or ''}".rstrip(": ")),
        ("PRIORITY", str(_PRIORITY.get(str(rec.get("status")), 6))),
        ("SYSLOG_IDENTIFIER", "slurmkit"),
    ]
    for key in ("node", "context", "job_id", "check", "status", "reason", "action"):
        v = rec.get(key)
        if v is not None and v != "":
            fields.append((f"SLURMKIT_{key.upper()}", str(v)))
    return fields


def encode_journal(fields: list[tuple[str, str]]) -> bytes:
    """journald's native protocol: `KEY=value\\n`, or for a value with a newline `KEY\\n<le64 length><value>\\n`."""
    out = bytearray()
    for k, v in fields:
        b = v.encode("utf-8", "replace")
        if b"\n" in b:
            out += k.encode() + b"\n" + struct.pack("<Q", len(b)) + b + b"\n"
        else:
            out += k.encode() + b"=" + b + b"\n"
    return bytes(out)


def to_journal(records: list[dict], sock_path: str = JOURNAL_SOCKET) -> bool:
    """Send each record to journald; False when there is no journald to send to."""
    if not os.path.exists(sock_path):
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.settimeout(1.0)  # a stuck journald must not hold a hook
        for rec in records:
            s.sendto(encode_journal(journal_fields(rec)), sock_path)
    except OSError:
        return False
    finally:
        s.close()
    return True


def syslog_line(rec: dict) -> str:
    parts = [
        f"{k}={json.dumps(str(rec[k]))}"
        for k in ("node", "context", "job_id", "check", "status", "action", "reason")
        if rec.get(k) not in (None, "")
    ]
    return " ".join(parts)


def to_syslog(records: list[dict]) -> None:
    if to_journal(records):
        return
    import syslog

    syslog.openlog("slurmkit", syslog.LOG_PID, syslog.LOG_DAEMON)
    for rec in records:
        syslog.syslog(_PRIORITY.get(str(rec.get("status")), 6), syslog_line(rec))


# -- alerts: the things that must not pass silently -------------------------------------------------------------------
def syslog_datagram(text: str, *, severity: int = 3, pid: int | None = None, now: float | None = None) -> bytes:
    """One syslog message as glibc's syslog() writes it to /dev/log: `<PRI>Mmm dd hh:mm:ss slurmkit[pid]: text`,
    facility daemon (pure, bounded to 4 KiB)."""
    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(now))
    msg = f"<{24 + severity}>{stamp} slurmkit[{os.getpid() if pid is None else pid}]: {text}"
    return msg.encode("utf-8", "replace")[:4096]


def send_syslog(text: str, *, severity: int = 3, path: str | None = None) -> bool:
    """Send one line to the node's syslog socket; False when there is none (or it does not take it in 1 s)."""
    path = path or os.environ.get("SLURMKIT_SYSLOG_SOCKET") or SYSLOG_SOCKET
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.settimeout(1.0)
        s.sendto(syslog_datagram(text, severity=severity), path)
    except OSError:
        return False
    finally:
        s.close()
    return True


def slurmd_log_file(conf: dict[bytes, bytes], node: str | None) -> str | None:
    """slurm.conf's SlurmdLogFile with %n (the node) and %h (this host) filled in (pure); None without one (slurmd
    then logs to syslog, which alert() writes to anyway)."""
    raw = conf.get(b"slurmdlogfile")
    if not raw:
        return None
    path = os.fsdecode(raw)
    host = os.uname().nodename.split(".")[0]
    return path.replace("%n", node or host).replace("%h", host)


def append_slurmd_log(path: str, text: str) -> bool:
    """Append one line to slurmd's log file, in slurmd's own form (`[time] error: ...`): slurmd logs nothing of a
    hook that exits 0, so this is where an admin reading slurmd's log sees it. Only an existing file is written."""
    t = time.time()
    line = f"[{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(t))}.{int(t * 1000) % 1000:03d}] error: {text}\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        os.write(fd, line.encode("utf-8", "replace")[:8192])
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def alert(message: str, *, conf: dict[bytes, bytes] | None = None) -> str:
    """Say `message` loudly, every time: a line on stderr (slurmd logs a failing hook's output), the same line in
    slurmd's log file and in syslog (priority err). Never raises; returns the line."""
    text = " ".join(f"slurmkit {message}".split())
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    try:
        if conf is None:
            from .nodeconf import slurm_conf

            conf = slurm_conf(os.environb)
        path = slurmd_log_file(conf, os.environ.get("SLURMD_NODENAME"))
        if path:
            append_slurmd_log(path, text)
        send_syslog(text)
    except Exception:  # noqa: BLE001 - an alert that cannot be said must not break the hook saying it
        pass
    return text


# -- Prometheus textfile ----------------------------------------------------------------------------------------------
def _label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _ts(rec: dict) -> float:
    try:
        return parse_utc_iso(str(rec.get("time")))
    except ValueError:
        return 0.0


def fold(state: dict, records: list[dict]) -> dict:
    """The node's metric state after `records` (pure): latest status per check, counts, standing drains."""
    checks = state.setdefault("checks", {})
    counts = state.setdefault("counts", {})
    drained = state.setdefault("drained", {})
    for rec in records:
        check, status = str(rec.get("check") or "unknown"), str(rec.get("status") or "unknown")
        if status in STATUS_VALUE:
            checks[check] = {"status": status, "time": _ts(rec)}
        key = f"{check}\t{status}"
        counts[key] = counts.get(key, 0) + 1
        action = str(rec.get("action") or "")
        if action == "drained":
            cause = str(rec.get("code") or check)
            drained[cause] = 1
        elif action in ("resumed", "resume", "returned"):
            drained.clear()
        idle = rec.get("idle_gpu_hours")
        if isinstance(idle, (int, float)) and not isinstance(idle, bool) and idle == idle and idle >= 0:
            state["idle_gpu_hours"] = state.get("idle_gpu_hours", 0.0) + float(idle)
    return state


def render(state: dict) -> str:
    """The text exposition format for one node's state."""
    lines = [
        "# HELP slurmkit_check_status Latest verdict of each check: 0 ok, 1 warn, 2 fail, -1 skip.",
        "# TYPE slurmkit_check_status gauge",
    ]
    for check, v in sorted(state.get("checks", {}).items()):
        lines.append(f'slurmkit_check_status{{check="{_label(check)}"}} {STATUS_VALUE[v["status"]]}')
    lines += [
        "# HELP slurmkit_check_timestamp_seconds When each check last reported.",
        "# TYPE slurmkit_check_timestamp_seconds gauge",
    ]
    for check, v in sorted(state.get("checks", {}).items()):
        lines.append(f'slurmkit_check_timestamp_seconds{{check="{_label(check)}"}} {v["time"]:.0f}')
    lines += [
        "# HELP slurmkit_records_total Health-log records written by this node.",
        "# TYPE slurmkit_records_total counter",
    ]
    for key, n in sorted(state.get("counts", {}).items()):
        check, _, status = key.partition("\t")
        lines.append(f'slurmkit_records_total{{check="{_label(check)}",status="{_label(status)}"}} {n}')
    lines += [
        "# HELP slurmkit_drained 1 while a slurmkit drain of this node for this cause stands.",
        "# TYPE slurmkit_drained gauge",
    ]
    for cause in sorted(state.get("drained", {})):
        lines.append(f'slurmkit_drained{{cause="{_label(cause)}"}} 1')
    lines += [
        "# HELP slurmkit_job_gpu_idle_hours_total Idle GPU-hours of the jobs that ran on this node.",
        "# TYPE slurmkit_job_gpu_idle_hours_total counter",
        f"slurmkit_job_gpu_idle_hours_total {state.get('idle_gpu_hours', 0.0):.6g}",
    ]
    return "\n".join(lines) + "\n"


STATE_PREFIX = "# slurmkit-state "


def _load_state(path: str) -> dict:
    """The metric state saved as the .prom file's first line (a comment, which the exposition format ignores):
    one file and one rename per hook, not two."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline(1 << 20)
    except OSError:
        return {}
    if not first.startswith(STATE_PREFIX):
        return {}
    try:
        state = json.loads(first[len(STATE_PREFIX) :])
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def to_textfile(textfile_dir: str, records: list[dict], *, state_dir: str) -> str:
    """Fold the records into the node's metric state and rewrite its .prom file (temp + rename), under an flock
    in state_dir so a prolog and an epilog of one node do not lose each other's counts."""
    import fcntl

    node = str(records[0].get("node") or socket.gethostname())
    from .nodeconf import safe_node_name

    if not safe_node_name(node):
        raise ValueError(f"node name {node!r} cannot name a metrics file")
    os.makedirs(state_dir, exist_ok=True)
    os.makedirs(textfile_dir, exist_ok=True)
    out = os.path.join(textfile_dir, f"slurmkit-{node}.prom")
    lock = os.open(
        os.path.join(state_dir, f"metrics-{node}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = fold(_load_state(out), [r for r in records if str(r.get("node") or node) == node])
        atomic_write(out, STATE_PREFIX + json.dumps(state, separators=(",", ":")) + "\n" + render(state))
    finally:
        os.close(lock)
    return out
