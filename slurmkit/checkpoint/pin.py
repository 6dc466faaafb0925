"""Pins (issue 29): what the replicator is about to copy, held still while the trainer saves and prunes.

The trainer's retention (`checkpoint.save(..., keep=N)`) deletes a step N saves after it was written. The
replicator chooses a step in one process and copies it in another (the copy child); a step pruned in between, or
while it is copied, used to leave the child nothing to copy. On a follower node of a multi-node job, which copies
only a step node 0 already published (so an older one than its own newest), that happened to every step under
load: the 2-node drill's intermittent `replicate-failed ... error="no report"`.

A pin of step NAME is `LOCAL/.tmp-repl-<10 digits>-<host>-<pid>-<8 hex>/NAME/`: a hard link to each file of NAME's
manifest, then the manifest, in directories made fresh. It costs no space while the trainer keeps the step, and
the space of one step after the trainer pruned it, until the pin is let go. Readers skip hidden names; the name
has the helper's temporary form (layout.SAVE_TMP_RE), so a pin whose wrapper died is removed by the trainer's
next save (`checkpoint.remove_stale_tmp`), like a killed save. Every source path is opened from a directory fd
without following a link (a symlink in a checkpoint is refused, as the copy refuses it); each link is checked
to be a regular file with the manifest's size. The copy then verifies every byte against the manifest as always.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from typing import Any

from .manifest import MANIFEST
from .safeio import DIR_FLAGS, opendir_at

PIN_KIND = "repl"

# errors that say hard links are not possible here (a filesystem without them, a link count at its limit): the
# copy then reads LOCAL directly, as before pins
UNSUPPORTED = (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS)


class Gone(Exception):
    """The step left LOCAL (pruned or replaced) before it was pinned whole."""


def pin(local: str, name: str, man: dict[str, Any]) -> str:
    """Pin LOCAL/NAME (its manifest `man`, as read by the scan); returns the pin's root (holding NAME/). Raises
    Gone when the step is no longer there as the manifest says, OSError when links cannot be made here."""
    from .. import checkpoint
    from .layout import step_number

    root = os.path.join(local, checkpoint._tmp_name(PIN_KIND, step_number(name)))
    os.mkdir(root, 0o700)
    try:
        _link_all(os.path.join(local, name), os.path.join(root, name), man)
    except BaseException:
        unpin(root)
        raise
    return root


def _link_all(src: str, dst: str, man: dict[str, Any]) -> None:
    try:
        sfd = os.open(src, DIR_FLAGS)
    except OSError as e:
        raise Gone(f"{src}: {e.strerror}") from None
    os.mkdir(dst, 0o755)
    dfd = os.open(dst, DIR_FLAGS)
    try:
        for rel, size in [(f["path"], f["size"]) for f in man["files"]] + [(MANIFEST, None)]:
            parent, _, base = rel.rpartition("/")
            try:
                spfd = opendir_at(sfd, parent) if parent else os.dup(sfd)
            except Exception as e:  # noqa: BLE001 - SyncError: a symlinked or vanished directory
                raise Gone(f"{src}/{rel}: {e}") from None
            try:
                dpfd = opendir_at(dfd, parent, create=True) if parent else os.dup(dfd)
                try:
                    try:
                        os.link(base, base, src_dir_fd=spfd, dst_dir_fd=dpfd, follow_symlinks=False)
                    except FileNotFoundError:
                        raise Gone(f"{src}/{rel}: gone") from None
                    st = os.stat(base, dir_fd=dpfd, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode) or (size is not None and st.st_size != size):
                        raise Gone(f"{src}/{rel}: not the regular file of {size} bytes the manifest lists")
                finally:
                    os.close(dpfd)
            finally:
                os.close(spfd)
    finally:
        os.close(dfd)
        os.close(sfd)
    # the manifest linked last must still be the one the scan read: a step replaced in between is not this one
    from . import manifest as mf

    try:
        again = mf.read_strict(dst)
    except (OSError, mf.ManifestError) as e:
        raise Gone(f"{dst}: {e}") from None
    if again != man:
        raise Gone(f"{src}: replaced while it was pinned")


def unpin(root: str) -> None:
    """Let a pin go (never follows a link: rmtree does not)."""
    shutil.rmtree(root, ignore_errors=True)


def keep_pins(pinned: list[str], done_top: str, leader: list[str], most: int) -> list[str]:
    """The pins a follower still needs (names, sorted): newer than what it published (`done_top`), and either
    published by node 0 (`leader`: a step it may copy now) or newer than node 0's newest (node 0 publishes only
    newer steps: one it may copy later); the newest `most` of those. Pure."""
    top = max(leader) if leader else ""
    keep = [n for n in sorted(pinned) if n > done_top and (n in leader or n > top)]
    return keep[-most:] if most > 0 else []
