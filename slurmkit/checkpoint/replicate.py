"""Replication during the job and restore on resume (issue 29): a checkpoint reaches durable storage as soon as it
is complete on node-local disk, not only when the epilog runs (which it never does on a node that died).

`slurmkit run --checkpoint-dir LOCAL --durable DEST` starts a `Replicator` next to the child. Every
`run.replicate_interval` seconds it looks at LOCAL's complete checkpoints (the layout of checkpoint/layout.py: a
`step-N` directory with a valid manifest) and copies the NEWEST one that DEST does not hold yet, with the engine
of `slurmkit sync` (syncdir.sync_dir: manifest-verified, published by one rename, retention of the job's own
series), as the job's own user (the wrapper runs as the job). At most one copy is in flight; when the trainer
saves faster than the copies go, the intermediate checkpoints are skipped (`next_to_copy`, pure). The step is
pinned first (hard links, checkpoint/pin.py) and copied from the pin: the trainer's retention may delete it from
LOCAL at any moment after it was chosen (a follower node pins each step node 0 may still publish). Each copy runs
in a child process (`python -m slurmkit.checkpoint.replicate copy ...`) at a lower CPU priority (`nice`), pausing
while the trainer writes a checkpoint and under a bandwidth limit (checkpoint/pacing.py), so training is not slowed
and a destination that hangs can be left behind: the wrapper never waits on it past `timeout`.

Before the child starts, `restore` brings the newest complete checkpoint at DEST that is newer than LOCAL's
newest to LOCAL (a filesystem DEST, or s3:// via s3.fetch; verified against the manifest), so `checkpoint.latest(LOCAL)` sees it: a job requeued
onto another node resumes from what was durable, not from nothing.

The epilog's final sync stays; it skips what is already at DEST (same manifest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .pacing import Throttle, YieldToSaves
from .selection import _same, scan_source

# --- pure decisions --------------------------------------------------------------------------------------------


def next_to_copy(local: dict[str, Any], done: dict[str, Any]) -> str | None:
    """The checkpoint to copy next: the newest complete one in `local` ({name: manifest or "marker"}), unless it
    is already durable (`done`: {name: manifest} published by this replicator or found at DEST) or older than the
    newest durable one. Intermediates are never chosen: only the newest counts. Pure."""
    if not local:
        return None
    newest = max(local)
    if done:
        top = max(done)
        if newest < top:
            return None
        if newest == top and (local[newest] == "marker" or _same(local[newest], done[top])):
            return None
    return newest


def restore_choice(local: list[str], durable: list[str]) -> str | None:
    """The durable checkpoint to bring to node-local disk before the child starts: DEST's newest when it is newer
    than LOCAL's newest (names sort in step order), else None. Pure."""
    if not durable:
        return None
    top = max(durable)
    return top if not local or top > max(local) else None


# --- restore (before the child starts) -------------------------------------------------------------------------


def restore(
    local: str, dest: str, *, deadline: float | None, workers: int = 2, algo: str = "sha256", part: int | None = None
) -> dict:
    """Copy DEST's newest complete checkpoint to LOCAL when it is newer than LOCAL's newest; on a multi-node DEST
    (checkpoint/parts.py) this node's `part` of the newest step that EVERY part holds. Returns
    {"restored": name|None, "step": int|None, "seconds", "errors": [...], "why": str}. Never raises."""
    from .parts import durable_steps, part_dir
    from .syncdir import sync_dir

    t0 = time.monotonic()
    out: dict[str, Any] = {"restored": None, "step": None, "errors": [], "why": ""}
    if dest.startswith("s3://"):
        return _restore_s3(local, dest, deadline, out, t0)
    try:
        durable, parts = durable_steps(dest)
        have, _ = scan_source(local)
    except (OSError, ValueError) as e:
        out["errors"].append(f"{dest}: {e}")
        return out
    source = dest if parts is None else part_dir(dest, part or 0)
    if parts is not None:
        # a multi-node job: a local step newer than the newest step complete across nodes may be one that another
        # node never finished; hide it (readers skip .tmp-*) so every node resumes from the same complete step
        out["hidden"] = hide_newer(local, sorted(have), durable[-1] if durable else "")
        have = {n: m for n, m in have.items() if n not in out["hidden"]}
    name = restore_choice(sorted(have), durable)
    if name is None:
        out["why"] = "node-local is as new as DEST" if durable else "nothing durable at DEST"
        return out
    os.makedirs(local, exist_ok=True)
    rep = sync_dir(source, local, keep=1 << 20, deadline=deadline, workers=workers, algo=algo, only=[name])
    out["errors"] = list(rep["errors"])
    if name in rep["copied"] or name in rep["skipped"]:
        from .layout import step_number

        out.update(restored=name, step=step_number(name))
    elif not out["errors"]:
        out["errors"].append(f"{name}: not restored ({rep['status']})")
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def _restore_s3(local: str, dest: str, deadline: float | None, out: dict, t0: float) -> dict:
    """restore() for an s3:// DEST (single-node layout): DEST's newest step with a manifest, fetched and verified
    (s3.fetch); a partial step is never made visible."""
    from .layout import step_number
    from .report import Deferred

    try:
        from .. import config
        from . import s3

        d = s3.S3Dest(dest, config.load().sync)
        complete, _, _ = d.scan()
        have, _ = scan_source(local) if os.path.isdir(local) else ({}, [])
        name = restore_choice(sorted(have), sorted(complete))
        if name is None:
            out["why"] = "node-local is as new as DEST" if complete else "nothing durable at DEST"
            return out
        os.makedirs(local, exist_ok=True)
        s3.fetch(d, name, local, deadline=deadline)
        out.update(restored=name, step=step_number(name))
    except Deferred:
        out["errors"].append(f"{dest}: restore not finished within the timeout")
    except Exception as e:  # noqa: BLE001 - never raises: the child starts from node-local disk, logged
        out["errors"].append(f"{dest}: {e}")
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def hide_newer(local: str, names: list[str], complete: str) -> list[str]:
    """Rename LOCAL's checkpoints newer than `complete` to `.tmp-incomplete-NAME` (kept, but never read)."""
    hidden = []
    for n in names:
        if n > complete:
            try:
                os.rename(os.path.join(local, n), os.path.join(local, f".tmp-incomplete-{n}-{os.urandom(3).hex()}"))
                hidden.append(n)
            except OSError:
                pass
    return hidden


# --- the replicator (a thread of the wrapper; each copy a child process) ----------------------------------------

PIN_MAX = 8  # a follower's pins at most (each holds one step's space once the trainer pruned it)


class Replicator:
    def __init__(
        self,
        source: str,
        dest: str,
        *,
        series: str | None,
        keep: int,
        interval: float,
        bwlimit_mib: float,
        nice: int,
        timeout: float,
        log: Callable[..., None],
        python: str = sys.executable,
        part: int | None = None,
        parts: int | None = None,
    ):
        self.source, self.dest, self.series, self.keep = source, dest, series, keep
        self.interval, self.bwlimit_mib, self.nice, self.timeout = interval, bwlimit_mib, nice, timeout
        self.log = log
        self.python = python
        # a multi-node job: this node's part goes to DEST/node-<part> (checkpoint/parts.py)
        self.part: int | None = (part or 0) if parts and parts > 1 else None
        self.parts: int | None = parts if self.part is not None else None
        self.target = dest if self.parts is None else os.path.join(dest, f"node-{self.part}")
        self.done: dict[str, Any] = {}
        self.first_seen: dict[str, float] = {}  # name -> wall time it was first seen complete (for the lag)
        self.copies = 0
        self.pins: dict[str, tuple[str, Any]] = {}  # name -> (pin root, manifest): checkpoint/pin.py
        self._no_pins = False  # hard links refused here: copies read LOCAL itself
        self._stop = threading.Event()
        self._busy = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._loop, name="slurmkit-replicator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        if self.parts is not None and self.part == 0:
            from .parts import record_parts

            try:
                record_parts(self.dest, self.parts, self.series)
            except OSError as e:
                self.log("replicate-failed", error=f"{self.dest}: parts record: {e}")
        while not self._stop.wait(self.interval):
            self.pass_once()

    def pass_once(self, timeout: float | None = None) -> str | None:
        """Copy the newest complete checkpoint if DEST lacks it; the name copied, or None. What is copied is
        pinned first (checkpoint/pin.py), so the trainer's retention cannot take it away from the copy."""
        with self._busy:
            try:
                local, _ = scan_source(self.source)
            except OSError:
                return None
            now = time.time()
            for n in local:
                self.first_seen.setdefault(n, now)
            if self.parts is not None and self.part != 0:
                from .. import checkpoint
                from .parts import next_part_to_copy, part_dir

                leader = [os.path.basename(c.path) for c in checkpoint.complete(part_dir(self.dest, 0))]
                # a follower copies only steps node 0 published (older than its own newest by a copy's time):
                # it pins each step it sees until node 0 publishes one of them or a newer one
                for n in [n for n in local if self._wanted(n, leader)][-PIN_MAX:]:
                    if n not in self.pins:
                        self._pin(n, local[n])
                have = {**local, **{n: m for n, (_, m) in self.pins.items()}}
                name = next_part_to_copy(have, self.done, leader)
            else:
                leader, have = [], local
                name = next_to_copy(local, self.done)
                if name is not None and name not in self.pins and not self._pin(name, local[name]):
                    return None  # gone between the scan and the pin: the next pass sees what is there now
            if name is None:
                self._let_go(leader)
                return None
            skipped = sorted(
                n for n in have if n not in self.done and n < name and (not self.done or n > max(self.done))
            )
            source = self.pins[name][0] if name in self.pins else self.source
            try:
                return self._copy(name, have[name], skipped, self.timeout if timeout is None else timeout, source)
            finally:
                self._let_go(leader)

    def _wanted(self, name: str, leader: list[str]) -> bool:
        """A follower's step that node 0 may still publish, or did and this node has not copied."""
        from .pin import keep_pins

        return bool(keep_pins([name], max(self.done) if self.done else "", leader, 1))

    def _pin(self, name: str, man: Any) -> bool:
        """Pin NAME; False when it is gone. Where links cannot be made, the copy reads LOCAL itself (logged)."""
        from . import pin

        if self._no_pins or not isinstance(man, dict):
            return True
        try:
            self.pins[name] = (pin.pin(self.source, name, man), man)
        except pin.Gone:
            return False
        except OSError as e:
            self._no_pins = e.errno in pin.UNSUPPORTED
            self.log("replicate-unpinned", checkpoint=name, error=str(e)[:300], why="copied from LOCAL itself")
        return True

    def _let_go(self, leader: list[str], every: bool = False) -> None:
        """Unpin what no pass will copy: all of node 0's (and a single node's) pins after each copy; a follower's
        older than what it published, and beyond the newest PIN_MAX."""
        from .pin import keep_pins, unpin

        keep = set()
        if not every and self.parts is not None and self.part != 0:
            keep = set(keep_pins(list(self.pins), max(self.done) if self.done else "", leader, PIN_MAX))
        for n in [n for n in self.pins if n not in keep]:
            unpin(self.pins.pop(n)[0])

    def _copy(self, name: str, man: Any, skipped: list[str], timeout: float, source: str) -> str | None:
        argv = [self.python, "-m", "slurmkit.checkpoint.replicate", "copy", source, self.target, name]
        argv += ["--keep", str(self.keep), "--bwlimit", str(self.bwlimit_mib), "--nice", str(self.nice)]
        if self.series:
            argv += ["--series", self.series]
        t0 = time.monotonic()
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            out, err = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            assert self._proc is not None
            self._proc.kill()  # a copier asleep on a hung destination may outlive this: it is not waited for
            self.log("replicate-failed", checkpoint=name, error=f"no answer within {timeout:g}s", dest=self.dest)
            return None
        except OSError as e:
            self.log("replicate-failed", checkpoint=name, error=str(e))
            return None
        finally:
            self._proc = None
        secs = time.monotonic() - t0
        try:
            rep = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except ValueError:
            rep = {}
        if name in rep.get("copied", []) or name in rep.get("skipped", []):
            self.done[name] = man
            self.copies += 1
            lag = time.time() - self.first_seen.get(name, time.time())
            self.log(
                "replicated",
                checkpoint=name,
                dest=self.target,
                bytes=rep.get("bytes", 0),
                seconds=f"{secs:.1f}",
                lag=f"{lag:.1f}s",
                paused=f"{rep['paused_for_saves']}s" if rep.get("paused_for_saves") else None,
                skipped=",".join(skipped) or None,
            )
            return name
        why = "; ".join(rep.get("errors", [])) or (err.strip().splitlines() or [f"no report ({rep.get('status')})"])[-1]
        self.log("replicate-failed", checkpoint=name, error=why[:300], dest=self.dest)
        return None

    def stop(self, final_timeout: float) -> None:
        """Stop the loop; wait for the copy in flight, then copy the newest once more, all within final_timeout."""
        self._stop.set()
        end = time.monotonic() + final_timeout
        if self._thread.is_alive():
            self._thread.join(timeout=max(0.0, end - time.monotonic()))
        left = end - time.monotonic()
        if left > 1 and not self._thread.is_alive():
            self.pass_once(timeout=left)
        if not self._thread.is_alive():
            with self._busy:
                self._let_go([], every=True)


# --- for one job: which part this wrapper is ---------------------------------------------------------------------


def job_part(environ: dict[str, str]) -> tuple[int | None, int | None, bool]:
    """(part, parts, replicates) for a wrapper in this environment. A multi-node job with one wrapper per task
    (`srun slurmkit run ...`): node rank SLURM_NODEID of SLURM_NNODES parts, and only the first task of each node
    (SLURM_LOCALID 0) replicates and restores. Otherwise one part (the batch step's wrapper). Pure."""
    try:
        nodes = int(environ.get("SLURM_NNODES") or 1)
        if nodes > 1 and environ.get("SLURM_STEP_ID") is not None and environ.get("SLURM_NODEID") is not None:
            return int(environ["SLURM_NODEID"]), nodes, environ.get("SLURM_LOCALID", "0") in ("", "0")
    except ValueError:
        pass
    return None, None, True


def for_job(opts, environ: dict[str, str], job_id: str | None, log) -> Replicator | None:
    """The wrapper's replicator (started), after restoring DEST's newest to node-local disk; None without
    --durable or on a node's second task."""
    part, parts, mine = job_part(environ)
    if not (opts.checkpoint_dir and opts.durable and mine):
        return None
    r = restore(opts.checkpoint_dir, opts.durable, deadline=time.monotonic() + opts.replicate_timeout, part=part)
    if r.get("hidden"):
        log("restore-hid", checkpoints=",".join(r["hidden"]), why="newer than the newest step every node made durable")
    if r["restored"]:
        log("restored", step=r["step"], checkpoint=r["restored"], source=opts.durable, seconds=r.get("seconds"))
    elif r["errors"]:
        log("restore-failed", source=opts.durable, error="; ".join(r["errors"])[:300])
    repl = Replicator(
        opts.checkpoint_dir,
        opts.durable,
        series=job_id,
        keep=opts.durable_keep,
        interval=opts.replicate_interval,
        bwlimit_mib=opts.replicate_bwlimit,
        nice=opts.replicate_nice,
        timeout=opts.replicate_timeout,
        log=log,
        part=part,
        parts=parts,
    )
    return repl


# --- the copy child -------------------------------------------------------------------------------------------


def _copy_main(argv: list[str]) -> int:
    import argparse

    from ..settings import SyncSettings
    from .syncdir import sync_dir

    ap = argparse.ArgumentParser(prog="python -m slurmkit.checkpoint.replicate copy")
    ap.add_argument("source")
    ap.add_argument("dest")
    ap.add_argument("name")
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--series")
    ap.add_argument("--bwlimit", type=float, default=0.0, help="MiB/s, 0: no limit")
    ap.add_argument("--nice", type=int, default=10)
    a = ap.parse_args(argv)
    if a.nice > 0:
        try:
            os.nice(a.nice)
        except OSError:
            pass
    settings = None
    if a.dest.startswith("s3://"):
        from .. import config

        settings = config.load().sync
    # a copy never competes with the trainer's synchronous save for the disk; the bandwidth limit on top
    pace = YieldToSaves(a.source, then=Throttle(a.bwlimit * (1 << 20)) if a.bwlimit > 0 else None)
    rep = sync_dir(
        a.source,
        a.dest,
        keep=max(1, a.keep),
        settings=settings if isinstance(settings, SyncSettings) else None,
        series=a.series,
        only=[a.name],
        progress=pace,
        workers=1,
    )
    if not rep["errors"] and a.name not in rep["copied"] + rep["skipped"] + rep["deferred"]:
        # the wrapper chose it as complete: its absence now is an error that says so, never an empty answer
        rep["errors"].append(
            f"{a.name}: no complete checkpoint of that name in {a.source} (removed or replaced after it was chosen)"
        )
        rep["status"] = "failed"
    print(json.dumps({**rep.as_dict(), "paused_for_saves": round(pace.paused, 1)}))
    return 0 if rep["status"] in ("ok", "nothing") else 1


if __name__ == "__main__":
    if sys.argv[1:2] != ["copy"]:
        print("usage: python -m slurmkit.checkpoint.replicate copy SOURCE DEST NAME [...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(_copy_main(sys.argv[2:]))
