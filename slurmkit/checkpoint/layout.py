"""The on-disk layout of checkpoints: ONE definition for the job-side helper (checkpoint/__init__.py) and the
sync (checkpoint/sync.py and its modules). Names here are a contract with checkpoints already on disk and with
temporaries of runs in flight: change none of them.

In a checkpoint directory DIR (written by the helper's `save`, read by `latest` and by the sync's source scan):

- `step-<10 digits>` (CHECKPOINT_RE, `name_for`, `step_of`) is a checkpoint, complete when it holds a valid
  `slurmkit-manifest.json` (MANIFEST). Other writers (a marker file, issue 5) may use any visible name; the
  sync then takes the step from the name's trailing digits (`step_number`).
- Anything hidden (a name starting with '.') is never a checkpoint: the helper's own temporaries are
  `.tmp-<kind>-<10 digits>-<host>-<pid>-<8 hex>` (SAVE_TMP_PREFIX, `owned_save_tmp`), the job's narrowing file
  is `.slurmkit-sync.yaml`. Kind `repl` is the replicator's pin of a step it copies (checkpoint/pin.py: hard
  links), removed like the helper's own once its process is gone.

At a sync destination DEST (written only by the sync):

- `NAME/` is a published checkpoint (the same NAME as at the source), complete once its manifest is there.
- `.slurmkit-tmp-NAME/` (TMP_PREFIX) is a copy being made (resumed by the next run), `.slurmkit-old-NAME/`
  (OLD_PREFIX) one being replaced or pruned, `.slurmkit-sync.lock` (LOCK_NAME) the lock that serializes syncs.
"""

from __future__ import annotations

import re

from .manifest import MANIFEST

CHECKPOINT_PREFIX = "step-"
STEP_DIGITS = 10
CHECKPOINT_RE = re.compile(r"^step-(\d{10})$")
HIDDEN_PREFIX = "."

# the helper's temporaries inside a checkpoint directory
SAVE_TMP_PREFIX = ".tmp-"
SAVE_TMP_RE = re.compile(r"^\.tmp-(?:step|del|old|repl)-\d{10}-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")

# the sync's names at a destination
TMP_PREFIX = ".slurmkit-tmp-"
OLD_PREFIX = ".slurmkit-old-"
LOCK_NAME = ".slurmkit-sync.lock"

_TRAILING_DIGITS = re.compile(r"(\d+)$")

__all__ = [
    "MANIFEST",
    "CHECKPOINT_PREFIX",
    "STEP_DIGITS",
    "CHECKPOINT_RE",
    "SAVE_TMP_PREFIX",
    "SAVE_TMP_RE",
    "TMP_PREFIX",
    "OLD_PREFIX",
    "LOCK_NAME",
    "name_for",
    "step_of",
    "step_number",
    "is_hidden",
]


def name_for(step: int) -> str:
    """The directory name of the checkpoint for `step`: 'step-0000001200'."""
    step = int(step)
    if step < 0 or step >= 10**STEP_DIGITS:
        raise ValueError(f"step {step} out of range 0..{10**STEP_DIGITS - 1}")
    return f"{CHECKPOINT_PREFIX}{step:0{STEP_DIGITS}d}"


def step_of(name: str) -> int | None:
    """The step a helper-written checkpoint name stands for, or None when the name is not one."""
    m = CHECKPOINT_RE.match(name)
    return int(m.group(1)) if m else None


def step_number(name: str) -> int:
    """The step of any checkpoint name: the helper's `step-<digits>`, else the name's trailing digits (other
    writers), else 0."""
    s = step_of(name)
    if s is not None:
        return s
    m = _TRAILING_DIGITS.search(name)
    return int(m.group(1)[-18:]) if m else 0


def is_hidden(name: str) -> bool:
    """Temporaries, locks and the job file: never a checkpoint, on either side."""
    return name.startswith(HIDDEN_PREFIX)
