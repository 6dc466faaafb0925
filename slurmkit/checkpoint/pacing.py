"""How a replication copy keeps out of training's way (issue 29): progress callbacks the copy engine calls after
each chunk it copies (engine._copy_fd), from the copy child of checkpoint/replicate.py.

- `Throttle`: a bandwidth limit (MiB/s), a sleep between chunks.
- `YieldToSaves`: the copy pauses while the trainer writes a checkpoint into LOCAL. `checkpoint.save` writes into a
  `.tmp-step-*` directory and renames it into place; while one exists the trainer is blocked in a synchronous save
  (as torch.save is), and a copy reading and writing the same disks beside it makes that save slower, which costs
  training time directly (bench/bench_replicate.py measured 4.4 s saves becoming 6.1 s). Between saves the disk is
  the copy's. A `.tmp-step-*` left by a save that was killed must not stop replication: each one is waited on for
  `max_pause` seconds at most, then ignored.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

SAVING_PREFIX = ".tmp-step-"  # layout.SAVE_TMP_RE's kind for a save in progress (del/old/repl are not saves)


class Throttle:
    """progress(n) callback that sleeps so the bytes copied stay under `rate` bytes/s on average (0: no limit).
    Called from several copy threads: one lock."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic, sleep=time.sleep):
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.start = clock()
        self.sent = 0
        self.lock = threading.Lock()

    def __call__(self, n: int) -> None:
        if self.rate <= 0:
            return
        with self.lock:
            self.sent += n
            ahead = self.sent / self.rate - (self.clock() - self.start)
        if ahead > 0:
            self.sleep(ahead)


def saves_in_progress(local: str) -> list[str]:
    """The `.tmp-step-*` entries of LOCAL (checkpoint.save's work in progress); [] when LOCAL cannot be read."""
    try:
        with os.scandir(local) as it:
            return [e.name for e in it if e.name.startswith(SAVING_PREFIX)]
    except OSError:
        return []


class YieldToSaves:
    """progress(n) callback that waits while a save is in progress in `local` (looked at every `poll` seconds at
    most), each save's directory for `max_pause` seconds at most; `then` (a Throttle) is called first."""

    def __init__(
        self,
        local: str,
        *,
        max_pause: float = 60.0,
        poll: float = 0.05,
        then: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep=time.sleep,
        look: Callable[[str], list[str]] = saves_in_progress,
    ):
        self.local, self.max_pause, self.poll, self.then = local, max_pause, poll, then
        self.clock, self.sleep, self.look = clock, sleep, look
        self.first_seen: dict[str, float] = {}  # a save's directory -> when this copy first saw it
        self.last_look = float("-inf")
        self.paused = 0.0  # seconds this copy spent waiting for saves (reported by the child)
        self.lock = threading.Lock()

    def _blocking(self) -> bool:
        now = self.clock()
        names = self.look(self.local)
        for n in names:
            self.first_seen.setdefault(n, now)
        for n in list(self.first_seen):
            if n not in names:
                del self.first_seen[n]
        return any(now - self.first_seen[n] < self.max_pause for n in names)

    def __call__(self, n: int) -> None:
        if self.then is not None:
            self.then(n)
        with self.lock:
            if self.clock() - self.last_look < self.poll:
                return
            start = self.clock()
            while self._blocking():
                self.sleep(self.poll)
            self.last_look = self.clock()
            self.paused += self.last_look - start
