"""A submitted job as an object: `slurmkit.submit()` returns a Job; `slurmkit.jobs()` lists them.

    job = slurmkit.submit("train.yaml")
    int(job), job.id, job.state(), job.wait(timeout=3600), job.exit_code, job.tail(20), job.cancel()
    for j in slurmkit.as_completed(jobs): print(j.id, j.state())

Where a job's state comes from, in order: squeue (`-t all`: running, pending and recently ended jobs), then sacct
(jobs slurmctld forgot, where the cluster keeps accounting), then `scontrol -o show job`. A cluster without
accounting (sacct: "accounting storage is disabled") is noted once per process and sacct is not asked again; a job
no source knows any more is a JobGone error (exit 3), never a guessed state. Every call has the site's Slurm
timeout; a Slurm that cannot be asked (timeout, no controller, munge refused) is SlurmUnavailable (exit 3).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator

from .. import proc
from ..errors import CommandError, SlurmkitError, UsageError
from ..slurm import jobs as sj
from ..slurm.diagnose import client_error

TAIL_LIMIT = 4 << 20  # the most of a job's output file tail() reads (the end of it)


class SlurmUnavailable(SlurmkitError):
    """Slurm could not be asked (no controller, a timeout, munge refused): exit 3, 'could not find out'."""

    exit_code = 3


class JobGone(SlurmUnavailable):
    """No source knows the job any more (slurmctld forgot it after MinJobAge and there is no accounting)."""


class Slurm:
    """Runs the Slurm client tools for job queries (argv lists, a timeout on each) and remembers, for the process,
    whether the cluster keeps accounting."""

    no_accounting: set[str] = set()  # SLURM_CONF values whose cluster said "accounting storage is disabled"

    def __init__(self, timeout: float = 10.0, bin_dir: str | None = None, say: Callable[[str], None] | None = None):
        self.timeout = timeout
        self.bin_dir = bin_dir
        self.say = say

    @classmethod
    def from_settings(cls, settings, say=None) -> Slurm:
        return cls(timeout=settings.slurm.timeout, bin_dir=settings.slurm.bin_dir, say=say)

    def run(self, argv: list[str], *, not_found_ok: bool = False) -> proc.Result | None:
        """Run a Slurm client; None when `not_found_ok` and Slurm said the job id is not (any more) known."""
        tool = argv[0]
        if self.bin_dir:
            argv = [os.path.join(self.bin_dir, tool), *argv[1:]]
        try:
            res = proc.run(argv, timeout=self.timeout, check=False)
        except CommandError as e:
            raise SlurmUnavailable(f"{tool}: {e}" if e.missing else f"{e} (is slurmctld up? `scontrol ping`)") from e
        text = res.stderr + res.stdout
        if not_found_ok and res.returncode != 0 and sj.NOT_FOUND_RE.search(text):
            return None
        if res.returncode != 0:
            msg = client_error(tool, res.stderr, res.stdout, res.returncode)
            if "munge" in msg or "unable to contact" in msg or "authentication" in text:
                raise SlurmUnavailable(msg)
            raise SlurmkitError(msg)
        return res

    def accounting(self) -> bool:
        return os.environ.get("SLURM_CONF", "") not in Slurm.no_accounting

    def squeue(
        self, ids: Iterable[str] = (), *, user: str | None = None, name: str | None = None
    ) -> list[sj.JobStatus]:
        argv = ["squeue", "-h", "-r", "-t", "all", "-O", sj.SQUEUE_FORMAT]
        ids = list(ids)
        if ids:
            argv += ["-j", ",".join(ids)]
        if user:
            argv += ["-u", user]
        if name:
            argv += ["-n", name]
        res = self.run(argv, not_found_ok=bool(ids))
        if res is None:
            return []
        try:
            return sj.parse_squeue(res.stdout)
        except ValueError as e:
            raise SlurmUnavailable(f"squeue printed what slurmkit does not read: {e}") from None

    def sacct(self, job_id: str) -> list[sj.JobStatus]:
        """sacct's record of the job; [] without accounting (said once per process and cluster)."""
        if not self.accounting():
            return []
        argv = ["sacct", "-n", "-P", "-X", "-o", ",".join(sj.SACCT_FIELDS), "-j", job_id]
        if self.bin_dir:
            argv = [os.path.join(self.bin_dir, "sacct"), *argv[1:]]
        try:
            res = proc.run(argv, timeout=self.timeout, check=False)
        except CommandError as e:
            raise SlurmUnavailable(str(e)) from e
        if res.returncode != 0 and sj.NO_ACCOUNTING_RE.search(res.stderr + res.stdout):
            Slurm.no_accounting.add(os.environ.get("SLURM_CONF", ""))
            note = (
                "this cluster keeps no job accounting (sacct: accounting storage is disabled): a job's end state "
                "is known only while slurmctld remembers it (MinJobAge)"
            )
            if self.say:
                self.say(note)
            else:
                import warnings

                warnings.warn(note, RuntimeWarning, stacklevel=2)
            return []
        if res.returncode != 0:
            raise SlurmUnavailable(client_error("sacct", res.stderr, res.stdout, res.returncode))
        try:
            return sj.parse_sacct(res.stdout)
        except ValueError as e:
            raise SlurmUnavailable(f"sacct printed what slurmkit does not read: {e}") from None

    def scontrol(self, job_id: str) -> list[sj.JobStatus]:
        res = self.run(["scontrol", "-o", "show", "job", job_id], not_found_ok=True)
        return [] if res is None else sj.parse_scontrol_jobs(res.stdout)

    def status(self, job_id: str) -> sj.JobStatus | None:
        """The job's status from the first source that knows it: squeue, sacct, scontrol (a job array's own id:
        the summary of its tasks)."""
        for source in (lambda i: self.squeue([i]), self.sacct, self.scontrol):
            st = sj.pick(job_id, source(job_id))
            if st is not None:
                return st
        return None


_default: Slurm | None = None


def _default_slurm() -> Slurm:
    """For a Job made without one: the default site config's Slurm timeout and bin_dir (read once)."""
    global _default
    if _default is None:
        from ..config import load

        _default = Slurm.from_settings(load(None))
    return _default


class Job:
    """A Slurm job (or one task of a job array). `int(job)` is its job id, so code that kept the int that
    submit() used to return keeps working; `job == 123` and `job == "120_3"` compare with the id."""

    def __init__(self, job_id: int | str, *, slurm: Slurm | None = None, status: sj.JobStatus | None = None):
        text = str(job_id).strip()
        head, _, task = text.partition("_")
        if not (head.isascii() and head.isdigit()) or ("_" in text and not (task.isascii() and task.isdigit())):
            raise UsageError(f"{text!r} is not a job id (expected 123 or 123_4 for an array task)")
        self.id = text
        self._number = int(head) if not task else None
        self._slurm = slurm
        self._last = status
        self._paths: tuple[str | None, str | None] | None = None

    # --- identity -------------------------------------------------------------------------------------------------
    def __int__(self) -> int:
        if self._number is not None:
            return self._number
        return self.status().job_id  # an array task's own job id

    def __index__(self) -> int:
        return int(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Job):
            return self.id == other.id
        if isinstance(other, bool):
            return NotImplemented
        if isinstance(other, int):
            return self._number == other
        if isinstance(other, str):
            return self.id == other
        return NotImplemented

    def __hash__(self) -> int:  # as the int's for a job, so a Job finds the entry of its id in an int-keyed dict
        return hash(self._number) if self._number is not None else hash(self.id)

    def __repr__(self) -> str:
        st = self._last.state if self._last else "?"
        return f"Job({self.id!r}, state={st})"

    def __str__(self) -> str:
        return self.id

    @property
    def slurm(self) -> Slurm:
        if self._slurm is None:
            self._slurm = _default_slurm()
        return self._slurm

    # --- state ----------------------------------------------------------------------------------------------------
    def status(self, refresh: bool = True) -> sj.JobStatus:
        """Everything Slurm says about the job now (a JobStatus); a settled end state is not asked again."""
        if self._last is not None and (not refresh or self._last.state in sj.SETTLED_STATES):
            return self._last
        st = self.slurm.status(self.id)
        if st is None:
            if self._last is not None and self._last.final:
                return self._last
            why = (
                "slurmctld no longer knows it (it keeps ended jobs for MinJobAge) and this cluster keeps no "
                "accounting, so its end state cannot be known"
                if not self.slurm.accounting()
                else "neither squeue, sacct nor scontrol knows it"
            )
            raise JobGone(f"job {self.id}: {why}")
        self._last = st
        return st

    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ... as Slurm says it now."""
        return self.status().state

    def done(self) -> bool:
        """Whether the job has ended (a final state); a job array when every task has."""
        return self.status().final

    @property
    def exit_code(self) -> int | None:
        """The batch script's exit status once the job ended (None before; 128+N when signal N ended it)."""
        st = self.status()
        if not st.final or st.exit_code is None:
            return None
        return 128 + st.exit_signal if st.exit_signal and not st.exit_code else st.exit_code

    @property
    def restarts(self) -> int:
        """How often Slurm requeued the job (SLURM_RESTART_COUNT of its current run)."""
        return self.status().restarts

    def wait(self, timeout: float | None = None, *, interval: float = 0.5, max_interval: float = 10.0) -> str:
        """Block until the job (every task of an array job) has ended; return its final state. TimeoutError
        after `timeout` seconds. Polls with a growing interval (0.5 s up to `max_interval`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = interval
        while True:
            if self.done():
                return self.status(refresh=False).state
            if deadline is not None and time.monotonic() + pause > deadline:
                left = deadline - time.monotonic()
                if left > 0:
                    time.sleep(left)
                    if self.done():
                        continue
                raise TimeoutError(f"job {self.id} still {self.status(refresh=False).state} after {timeout:g}s")
            time.sleep(pause)
            pause = min(pause * 1.5, max_interval)

    # --- arrays ---------------------------------------------------------------------------------------------------
    def is_array(self) -> bool:
        """Whether this handle is a whole job array (a sweep), not one job or one task."""
        if "_" in self.id:
            return False
        st = self.status(refresh=self._last is None)
        return st.array_job_id is not None and st.array_task_id is None

    def tasks(self) -> list[Job]:
        """The array's tasks as Jobs (`120_0`, `120_1`, ...); [self] for a job that is no array."""
        if "_" in self.id:
            return [self]
        found = [s for s in self.slurm.squeue([self.id]) if s.array_job_id == self._number]
        if not found:
            found = [s for s in self.slurm.scontrol(self.id) if s.array_job_id == self._number]
        if not found:
            return [self]
        return [Job(s.id, slurm=self.slurm, status=s) for s in sorted(found, key=lambda s: s.array_task_id or 0)]

    # --- output ---------------------------------------------------------------------------------------------------
    def _output_paths(self) -> tuple[str | None, str | None]:
        if self._paths is None and self._last is not None and self._last.stdout and "%" not in self._last.stdout:
            self._paths = (self._last.stdout, self._last.stderr)
        if self._paths is None:
            recs = [s for s in self.slurm.scontrol(self.id) if s.id == self.id or str(s.job_id) == self.id]
            if recs:
                self._paths = (recs[0].stdout, recs[0].stderr)
            else:
                raise JobGone(f"job {self.id}: slurmctld no longer knows it, so neither where its output went")
        return self._paths

    @property
    def stdout_path(self) -> str | None:
        """The job's output file (Slurm's --output, expanded), as slurmctld reports it."""
        return self._output_paths()[0]

    @property
    def stderr_path(self) -> str | None:
        """The job's error file (the output file unless --error was given)."""
        return self._output_paths()[1]

    def tail(self, n: int = 20, *, stderr: bool = False) -> list[str]:
        """The last `n` lines of the job's output (or error) file; [] when it does not exist yet. Reads at most
        the last 4 MiB."""
        path = self.stderr_path if stderr else self.stdout_path
        if not path:
            return []
        return tail_lines(path, n)

    # --- actions --------------------------------------------------------------------------------------------------
    def cancel(self, signal: str | None = None) -> None:
        """scancel the job (with `signal`: send it to the job's steps instead of ending the job)."""
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal_name(signal)}")
        self.slurm.run([*argv, self.id])

    def preempt(self, signal: str = "USR2") -> None:
        """Deliver what a preemption delivers to a slurmkit job: its --signal (B:USR2) to the batch shell only,
        which is `slurmkit run`; it checkpoints and requeues as after a real preemption."""
        self.slurm.run(["scancel", "--batch", f"--signal={signal_name(signal)}", self.id])


def signal_name(sig: str) -> str:
    """'SIGUSR2', 'usr2', '12' -> 'USR2' (a name Slurm reads); UsageError for anything else."""
    from ..signals import signame, signum

    try:
        return signame(signum(sig)).removeprefix("SIG")
    except (ValueError, KeyError):
        raise UsageError(f"unknown signal {sig!r} (expected a name such as USR2 or TERM)") from None


def tail_lines(path: str, n: int) -> list[str]:
    """The last `n` lines of a text file, reading at most TAIL_LIMIT bytes from its end; [] if it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise SlurmkitError(f"cannot read {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - TAIL_LIMIT))
        data = f.read(TAIL_LIMIT)
    lines = data.decode("utf-8", "replace").splitlines()
    if size > TAIL_LIMIT and lines:
        lines = lines[1:]  # the first line was cut
    return lines[-n:] if n > 0 else []


def jobs(
    *, user: str | None = None, name: str | None = None, all_users: bool = False, slurm: Slurm | None = None
) -> list[Job]:
    """The jobs slurmctld knows (running, pending and recently ended), as Jobs with their status read: yours by
    default, `user`'s, or everyone's with all_users=True; `name` keeps those of that job name."""
    s = slurm or _default_slurm()
    if not all_users and not user:
        import pwd

        user = pwd.getpwuid(os.getuid()).pw_name
    return [Job(st.id, slurm=s, status=st) for st in s.squeue(user=None if all_users else user, name=name)]


def as_completed(jobs: Iterable[Job], timeout: float | None = None, *, interval: float = 1.0) -> Iterator[Job]:
    """Yield each job as it ends (any final state), in the order they end; one squeue for all of them per poll.
    TimeoutError when `timeout` seconds pass with jobs still running."""
    pending = {j.id: j for j in jobs}
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = interval
    while pending:
        by_slurm: dict[int, list[Job]] = {}
        for j in pending.values():
            by_slurm.setdefault(id(j.slurm), []).append(j)
        for group in by_slurm.values():
            answer = group[0].slurm.squeue([j.id for j in group])
            for j in group:
                st = sj.pick(j.id, answer)
                if st is not None:
                    j._last = st
                if (st is not None and st.final) or (st is None and j.done()):  # done() asks sacct, scontrol
                    del pending[j.id]
                    yield j
        if not pending:
            return
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} job(s) still running after {timeout:g}s: {', '.join(pending)}")
        time.sleep(pause)
        pause = min(pause * 1.5, 10.0)
