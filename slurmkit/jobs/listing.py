"""What `slurmkit jobs` shows of each job: its status and the last event `slurmkit run` wrote into its output
("resumed step=120", "requeued kind=preemption"), read from the job's error file, else its output file.

A job's files belong to its user: run as root, slurmkit reads one only when the file is owned by the job's user
(so a job cannot point its output at a file of someone else's and have root show it), never following a
symbolic link, and only its last 64 KiB.
"""

from __future__ import annotations

import os

from ..slurm.jobs import JobStatus, event_summary, run_events
from .handle import Job

EVENT_WINDOW = 64 << 10


def _user_uid(user: str) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def read_tail_as_user(path: str, user: str, limit: int = EVENT_WINDOW) -> str | None:
    """The last `limit` bytes of `path` as text; None when it is missing, unreadable, a link, not a regular file
    or (run as root) not owned by `user`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        import stat

        if not stat.S_ISREG(st.st_mode):
            return None
        if os.geteuid() == 0 and user != "root" and st.st_uid != _user_uid(user):
            return None
        f.seek(max(0, st.st_size - limit))
        return f.read(limit).decode("utf-8", "replace")


def last_event(st: JobStatus) -> dict | None:
    """The last `slurmkit run` event in the job's error file (else output file), or None."""
    for path in dict.fromkeys(p for p in (st.stderr, st.stdout) if p and "%" not in p):
        text = read_tail_as_user(path, st.user)
        if text:
            events = run_events(text)
            if events:
                return events[-1]
    return None


def job_row(job: Job) -> dict:
    """One job for `slurmkit jobs --json`: its status and last run event (`event`: a few words, or null)."""
    st = job.status(refresh=False)
    ev = last_event(st)
    d = st.to_dict()
    d["event"] = event_summary(ev) if ev else None
    d["event_time"] = ev["time"] if ev else None
    return d
