"""Checkpoints that are complete or invisible: the job-side helper and the manifest the epilog's sync reads.

A training script uses three calls (standard library only: importing this costs milliseconds):

    from slurmkit import checkpoint

    ck = checkpoint.latest(CKPT_DIR)                   # newest COMPLETE checkpoint, or None
    if ck:
        state = load(ck.path)                          # ck.step, ck.manifest are there too
    while step < target:
        ...train one step...
        if step % 100 == 0 or checkpoint.stop_requested():
            checkpoint.save(CKPT_DIR, step, lambda tmp: torch.save(model.state_dict(), f"{tmp}/model.pt"), keep=3)
        if checkpoint.stop_requested():
            sys.exit(0)                                # `slurmkit run` requeues the job; the next run resumes

Directory layout (a contract: the epilog's sync, issue 5, and `slurmkit sync` rely on it)
------------------------------------------------------------------------------------------
Inside a checkpoint directory DIR:

- `DIR/step-0000001200/` is a checkpoint: the name is `step-` + the step as 10 zero-padded digits
  (`CHECKPOINT_RE`, defined once in checkpoint/layout.py for this helper and the sync), so lexical order is
  step order. It is COMPLETE when it holds a valid
  `slurmkit-manifest.json` (manifest.MANIFEST). `save` only ever makes it appear by one atomic rename of a
  directory whose files, sub-directories and manifest were already fsynced: a directory with that name and a
  valid manifest is never partial.
- `DIR/.tmp-*` are work in progress or debris (a save being written, killed, or an old checkpoint being
  replaced or deleted). Anything whose name starts with `.tmp-` (TMP_PREFIX) must be skipped by readers.
  A temporary directory is named `.tmp-step-<10 digits>-<host>-<pid>-<random>`; `save` removes those left by
  dead processes of the same host.
- Anything else in DIR is not slurmkit's and is left alone.

Retention (`save(..., keep=N)`) hides a checkpoint first (rename to `.tmp-del-...`) and deletes it after, so
a half-deleted checkpoint never looks complete either.

Stop requests
-------------
`slurmkit run` asks its child to checkpoint two ways at once, both set up through the environment:

- a flag file: `$SLURMKIT_STOP_FILE` names a file the wrapper creates when it asks (always);
- a signal: `$SLURMKIT_STOP_SIGNAL` (default `SIGTERM`, empty when the wrapper was told `--checkpoint-signal
  none`). When that variable is set, importing this module installs a handler for that signal (main thread
  only, and only where the handler is still the default one) that just records the request; SIGTERM from
  `scancel` or from the time limit is recorded the same way, so a cancelled job gets the chance to save too.
  Once a stop is requested (either way), that signal is ignored: repeats arrive (Slurm signals every process
  and the wrapper forwards; the flag may be seen first), and one during interpreter shutdown would otherwise
  kill the process with it.

`stop_requested()` is true once either has happened. Outside `slurmkit run`, `install_stop_handler()` catches
the signals you name (default SIGTERM) the same way.
"""

from __future__ import annotations

import errno
import os
import signal
from ..record import Record
from collections.abc import Callable

from . import manifest
from ..proc import pid_alive
from ..signals import signum
from .layout import CHECKPOINT_PREFIX, CHECKPOINT_RE, STEP_DIGITS, name_for, step_of  # noqa: F401
from .layout import SAVE_TMP_PREFIX as TMP_PREFIX
from .layout import SAVE_TMP_RE as _TMP_OWNED_RE

ENV_STOP_FILE = "SLURMKIT_STOP_FILE"
ENV_STOP_SIGNAL = "SLURMKIT_STOP_SIGNAL"
ENV_CHECKPOINT_DIR = "SLURMKIT_CHECKPOINT_DIR"


class Checkpoint(Record, frozen=True, kw_only=False):
    """A published checkpoint: its directory, its step and its manifest."""

    path: str  # the checkpoint directory, e.g. /ckpt/step-0000001200
    step: int
    manifest: dict


# --- reading ---------------------------------------------------------------------------------------------------


def _quick_check(path: str, m: dict) -> bool:
    """Every file of the manifest is there with its size (no hashing: cheap enough to do on every resume)."""
    for f in m["files"]:
        full = os.path.join(path, *f["path"].split("/"))
        try:
            st = os.lstat(full)
        except OSError:
            return False
        if not os.path.isfile(full) or os.path.islink(full) or st.st_size != f["size"]:
            return False
    return True


def complete(dir: str, *, verify: bool = False) -> list[Checkpoint]:
    """The complete checkpoints in `dir`, oldest first. Complete: a checkpoint name, a valid manifest whose step
    matches the name, and every listed file present with its size (`verify=True`: and its hash)."""
    try:
        names = sorted(os.listdir(dir))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        step = step_of(name)
        if step is None:
            continue
        path = os.path.join(dir, name)
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        m = manifest.read(path)
        if m is None or m["step"] != step or not _quick_check(path, m):
            continue
        if verify and manifest.verify(path, m):
            continue
        out.append(Checkpoint(path, step, m))
    return out


def latest(dir: str, *, verify: bool = False) -> Checkpoint | None:
    """The newest complete checkpoint in `dir` (None when there is none). Temporary directories, directories
    without a valid manifest and ones missing a file are skipped; `verify=True` also checks every hash (reads
    all the data) and falls back to an older checkpoint when one does not verify."""
    found = complete(dir, verify=verify)
    return found[-1] if found else None


# --- writing ---------------------------------------------------------------------------------------------------


def _fsync_tree(root: str) -> None:
    """fsync every regular file and every directory under root (deepest first), then root itself."""
    for dirpath, _dirs, filenames in os.walk(root, topdown=False):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        manifest.fsync_dir(dirpath)


def _tmp_name(kind: str, step: int) -> str:
    import socket  # lazily, as shutil: the epilog's sync imports this package on every job

    host = socket.gethostname().split(".")[0].replace("-", "_") or "host"
    return f"{TMP_PREFIX}{kind}-{step:0{STEP_DIGITS}d}-{host}-{os.getpid()}-{os.urandom(4).hex()}"


def _hide_and_remove(dir: str, name: str, step: int) -> None:
    """Remove a checkpoint so that no moment shows it half-deleted: rename it out of sight, then delete."""
    hidden = os.path.join(dir, _tmp_name("del", step))
    try:
        os.rename(os.path.join(dir, name), hidden)
    except FileNotFoundError:
        return
    manifest.fsync_dir(dir)
    import shutil

    shutil.rmtree(hidden, ignore_errors=True)


def remove_stale_tmp(dir: str) -> list[str]:
    """Delete `.tmp-*` directories that this host's dead processes left behind (a save that was killed).
    Directories of live processes and of other hosts are left alone. Returns the names removed."""
    import socket

    host = socket.gethostname().split(".")[0].replace("-", "_") or "host"
    removed: list[str] = []
    try:
        names = os.listdir(dir)
    except FileNotFoundError:
        return removed
    for name in names:
        m = _TMP_OWNED_RE.match(name)
        if not m or m.group("host") != host:
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or pid_alive(pid):
            continue
        import shutil

        shutil.rmtree(os.path.join(dir, name), ignore_errors=True)
        removed.append(name)
    return removed


def save(
    dir: str,
    step: int,
    write_fn: Callable[[str], object],
    *,
    keep: int | None = None,
    extra: dict | None = None,
    algo: str = manifest.DEFAULT_ALGO,
) -> Checkpoint:
    """Write checkpoint `step` into `dir` atomically and return it.

    `write_fn(tmpdir)` writes the checkpoint's files into `tmpdir` (a fresh directory inside `dir`). Then every
    file and directory is fsynced, the manifest (sizes, hashes) is written last, the directory is renamed to
    `step-<10 digits>` and `dir` is fsynced. If anything fails (or the process dies) before the rename, only a
    `.tmp-` directory is left, which readers skip. A complete checkpoint of the same step is replaced (the old
    one is hidden first, so `latest` sees the previous step for that moment, never a partial one).

    `keep=N` then deletes all but the newest N complete checkpoints. One writer per directory.
    """
    final_name = name_for(step)
    os.makedirs(dir, exist_ok=True)
    remove_stale_tmp(dir)
    tmp = os.path.join(dir, _tmp_name("step", int(step)))
    os.mkdir(tmp, 0o755)
    try:
        write_fn(tmp)
        _fsync_tree(tmp)
        m = manifest.build(tmp, int(step), algo=algo, extra=extra)
        manifest.write(tmp, m)  # fsyncs tmp after the manifest lands
        final = os.path.join(dir, final_name)
        if os.path.lexists(final):
            _hide_and_remove(dir, final_name, int(step))
        try:
            os.rename(tmp, final)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise OSError(
                e.errno,
                f"checkpoint.save: {final_name} appeared in {dir} while this process saved step {step}: another "
                "process saves into the same directory (one writer per directory: save from rank 0 only, or give "
                "each writer its own directory)",
                final,
            ) from None
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest.fsync_dir(dir)
    ck = Checkpoint(final, int(step), m)
    if keep is not None:
        prune(dir, keep)
    return ck


def prune(dir: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` complete checkpoints (keep >= 1). Returns the names removed."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    found = complete(dir)
    removed = []
    for ck in found[:-keep]:
        name = os.path.basename(ck.path)
        _hide_and_remove(dir, name, ck.step)
        removed.append(name)
    return removed


# --- stop requests ---------------------------------------------------------------------------------------------

_stop = False
_handled: set[int] = set()  # signals whose handler is ours


def _ignore_repeats() -> None:
    """Once a stop is requested, ignore our stop signals: the request often arrives more than once (Slurm signals
    every process of the step, the wrapper forwards, srun forwards from two processes, the flag file is seen
    before the signal lands), and one landing during interpreter shutdown, which restores the default action,
    would kill the process with it. A process that hangs still gets Slurm's SIGKILL after KillWait."""
    for num in list(_handled):
        try:
            if signal.getsignal(num) is _on_stop_signal:
                signal.signal(num, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread: the handler stays, harmless
            pass


def _on_stop_signal(signum, frame) -> None:
    global _stop
    _stop = True
    _ignore_repeats()


def request_stop() -> None:
    """Mark a stop as requested in this process (what the signal handler does)."""
    global _stop
    _stop = True
    _ignore_repeats()


def stop_requested() -> bool:
    """True once `slurmkit run` asked this process to checkpoint and stop: its signal arrived (see the module
    docstring) or its flag file ($SLURMKIT_STOP_FILE) exists. Cheap: one flag test and at most one stat."""
    if _stop:
        return True
    path = os.environ.get(ENV_STOP_FILE)
    if path and os.path.exists(path):
        request_stop()
    return _stop


def install_stop_handler(signals=("SIGTERM",), *, force: bool = False) -> list[int]:
    """Make these signals set stop_requested() instead of killing the process. Only from the main thread; a
    handler someone else installed is kept unless `force`. Returns the signal numbers now handled."""
    done = []
    for s in signals:
        num = signum(s)
        try:
            if not force and signal.getsignal(num) not in (signal.SIG_DFL, None, _on_stop_signal):
                continue
            signal.signal(num, _on_stop_signal)
            _handled.add(num)
            done.append(num)
        except ValueError:  # not the main thread
            break
    return done


def _install_from_env() -> None:
    name = os.environ.get(ENV_STOP_SIGNAL, "")
    if name:
        try:
            install_stop_handler([name])
        except (KeyError, ValueError):
            pass


_install_from_env()

__all__ = [
    "Checkpoint",
    "save",
    "latest",
    "complete",
    "prune",
    "stop_requested",
    "request_stop",
    "install_stop_handler",
    "name_for",
    "step_of",
    "remove_stale_tmp",
    "TMP_PREFIX",
    "CHECKPOINT_RE",
]

from ..efficiency.steps import report_step  # noqa: E402  (issue 15: MFU; lives in slurmkit/efficiency/steps.py)

__all__ += ["report_step"]
