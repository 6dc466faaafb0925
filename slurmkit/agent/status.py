"""What `slurmkit agent status` shows of a node's hook agent (slurmkit/agent/server.py): whether it answers on its
socket (a `status` request of the hooks' protocol), and the status file it keeps beside the socket: its pid, when
it started, the hooks it served, the requests it dropped (a client that had left: that hook ran in its client's
process) and its last error.

The agent writes the file (atomic_write) when a count changes, at most once a second; an agent older than the file
answers the probe ("fallback") and has no file: the command then says it answers, and no more. Fallbacks a client
took on its own (no agent, no answer in time) never reach the agent: they are in slurmd's log and syslog.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from . import client

SUFFIX = ".status.json"
MAX_STATUS = 64 * 1024


def status_path(sock: str) -> str:
    return sock + SUFFIX


def new_status(sock: str, pid: int, previous: dict | None = None) -> dict:
    """The file's first content. `previous`: the file an agent that re-executed itself (an upgrade) left: its
    counts go on."""
    prev = previous or {}
    return {
        "pid": pid,
        "socket": sock,
        "started": prev.get("started") or time.time(),
        "restarted": time.time() if previous else None,
        "hooks_served": int(prev.get("hooks_served") or 0),
        "dropped": int(prev.get("dropped") or 0),
        "last_error": prev.get("last_error"),
        "updated": time.time(),
    }


def apply_events(doc: dict, data: bytes) -> bool:
    """Count what the agent's children reported (lines: b"s" a hook served, b"d" a request dropped, b"e TEXT" an
    error); True when something changed (pure but for the time of an error)."""
    changed = False
    for line in data.split(b"\n"):
        if line == b"s":
            doc["hooks_served"] += 1
        elif line == b"d":
            doc["dropped"] += 1
        elif line.startswith(b"e "):
            doc["last_error"] = {"time": time.time(), "error": line[2:400].decode("utf-8", "replace")}
        else:
            continue
        changed = True
    return changed


class StatusFile:
    """The agent's side: the file, kept current from its children's reports (at most one write a second)."""

    def __init__(self, sock: str, pid: int, replace: bool) -> None:
        try:
            previous = read_status(sock) if replace else None
        except OSError:
            previous = None
        self.path = status_path(sock)
        self.doc = new_status(sock, pid, previous if previous and previous.get("pid") == pid else None)
        self.written, self.dirty = 0.0, True
        self.flush()

    def feed(self, fd: int) -> None:
        """Read what the children reported on `fd` (-1: nothing came) and write the file when it is due."""
        if fd >= 0:
            try:
                self.dirty |= apply_events(self.doc, os.read(fd, 65536))
            except OSError:
                pass
        if self.dirty and time.monotonic() - self.written >= 1:
            self.flush()

    def flush(self) -> None:
        from ..files import atomic_write

        self.doc["updated"] = time.time()
        try:
            atomic_write(self.path, json.dumps(self.doc) + "\n")
        except OSError as e:
            print(f"slurmkit agent: cannot write its status file: {e}", file=sys.stderr, flush=True)
        self.written, self.dirty = time.monotonic(), False


def read_status(sock: str) -> dict | None:
    """The status file beside `sock`, or None: there is none (an old agent, or none ran). OSError: unreadable."""
    try:
        with open(status_path(sock), "rb") as f:
            data = f.read(MAX_STATUS + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_STATUS:
        raise OSError(f"{status_path(sock)}: larger than {MAX_STATUS} bytes")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise OSError(f"{status_path(sock)}: not JSON ({e})") from None
    return doc if isinstance(doc, dict) else None


def probe(sock: str, timeout: float = 2.0) -> tuple[str, str]:
    """Ask the agent at `sock` whether it is there: ("answering", its answer), ("not running", why),
    ("not answering", why) or ("unknown", why: this process may not ask, e.g. not root)."""
    try:
        os.lstat(sock)
    except FileNotFoundError:
        return "not running", f"no socket at {sock}"
    except PermissionError as e:
        return "unknown", f"{sock}: {e.strerror} (the socket is root's)"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.settimeout(timeout)
        try:
            s.connect(sock)
        except ConnectionRefusedError:
            return "not running", f"nobody listens on {sock} (a socket file left behind)"
        except PermissionError as e:
            return "unknown", f"{sock}: {e.strerror} (the socket is root's)"
        except OSError as e:
            return "not answering", f"{sock}: {type(e).__name__}: {e}"
        try:
            s.send(client.MAGIC + b"\0" + client.STATUS)
            answer = s.recv(64)
        except TimeoutError:
            return "not answering", f"no answer on {sock} within {timeout:g} s"
        except OSError as e:
            return "not answering", f"{sock}: {type(e).__name__}: {e}"
        if answer.startswith(b"agent ") or answer == b"fallback":
            return "answering", answer.decode("ascii", "replace")
        return "not answering", f"{sock} answered {answer[:20]!r}" if answer else f"{sock} hung up without an answer"
    finally:
        s.close()
