"""The wrapper's imperative shell: the child, its signals, the checkpoint ask, the requeue (see slurmkit/run)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from ..record import Record, field
from collections.abc import Callable

from ..times import duration_or_none as parse_duration, utc_iso
from ..signals import signame, signum
from ..checkpoint import ENV_CHECKPOINT_DIR, ENV_STOP_FILE, ENV_STOP_SIGNAL
from .decide import FORWARDED, TERMINATING, Decision, classify, dist_env, requeue_decision
from .imds import Imds, SpotWatcher


# --- the wrapper ------------------------------------------------------------------------------------------------


class RunOptions(Record, kw_only=False):
    signal: str = "USR2"
    checkpoint_signal: str = "TERM"  # or "none"
    grace: float = 60.0
    max_requeues: int = 10
    requeue_on: list[str] = field(default_factory=lambda: ["timeout", "preemption", "spot", "node-fault"])
    timeout_window: float = 600.0
    master_port: int | None = None
    imds_endpoint: str | None = None
    imds_poll_interval: float = 5.0
    imds_timeout: float = 2.0
    spot_margin: float = 15.0
    restart_delay: int = 5  # after a requeue: eligible again this long after the wrapper ends (0: Slurm's hold)
    durable: str | None = None  # replicate each complete checkpoint here during the job (issue 29)
    replicate_interval: float = 2.0
    replicate_bwlimit: float = 0.0
    replicate_nice: int = 10
    replicate_timeout: float = 600.0
    durable_keep: int = 3
    checkpoint_dir: str | None = None
    dry_run: bool = False
    after_requeue_wait: float = 60.0  # how long to wait for Slurm to end this run after a requeue
    flops_per_step: float | None = None  # MFU (issue 15): SLURMKIT_STEP lines on the child's stdout count steps

    @classmethod
    def from_settings(cls, rs, **overrides) -> RunOptions:
        base = {
            f: getattr(rs, f)
            for f in (
                "signal",
                "checkpoint_signal",
                "grace",
                "max_requeues",
                "requeue_on",
                "timeout_window",
                "master_port",
                "imds_endpoint",
                "imds_poll_interval",
                "imds_timeout",
                "spot_margin",
                "restart_delay",
                "durable",
                "replicate_interval",
                "replicate_bwlimit",
                "replicate_nice",
                "replicate_timeout",
                "durable_keep",
            )
        }
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


def _now_iso() -> str:
    return utc_iso()


def _fmt(v) -> str:
    s = str(v)
    return json.dumps(s) if (not s or any(c in s for c in ' "=\n\t')) else s


class Runner:
    def __init__(
        self,
        argv: list[str],
        opts: RunOptions,
        *,
        environ: dict[str, str] | None = None,
        backend_factory: Callable[[], object] | None = None,
        stream=None,
        node_probe: Callable[[], list[dict]] | None = None,
    ):
        self.argv = list(argv)
        self.opts = opts
        self.environ = dict(os.environ if environ is None else environ)
        self.backend_factory = backend_factory
        self.stream = stream or sys.stderr
        self.node_probe = node_probe  # the node's fault checks (nodefault.node_findings), for node-fault requeues
        self.job_id = self.environ.get("SLURM_JOB_ID") or None
        try:
            self.restarts = int(self.environ.get("SLURM_RESTART_COUNT") or 0)
        except ValueError:
            self.restarts = 0
        self.leader = self.environ.get("SLURM_PROCID", "0") in ("", "0")
        self.trigger = signum(opts.signal)
        self.child_is_srun = bool(self.argv) and os.path.basename(self.argv[0]) == "srun"
        cs = (opts.checkpoint_signal or "none").strip()
        self.ask_signal = None if cs.lower() == "none" else signum(cs)
        # the signals caught and not yet handled. No lock: the handler runs in the main thread, between two
        # bytecodes of whatever it was doing, so a lock the loop held at that moment would never be released; and
        # the shorter the handler, the less it nests under a burst of signals. deque.append and popleft are atomic.
        self._pending: deque[int] = deque()
        self._log_lock = threading.Lock()
        self._backend = None
        self._restart_set = False  # run.restart_delay applied once (logged once)

    # -- plumbing --------------------------------------------------------------------------------------------------
    def log(self, event: str, **kv) -> None:
        head = f"slurmkit run: {_now_iso()} job={self.job_id or '-'} restart={self.restarts} event={event}"
        line = head + "".join(f" {k}={_fmt(v)}" for k, v in kv.items() if v is not None)
        with self._log_lock:
            try:
                print(line, file=self.stream, flush=True)
            except (OSError, ValueError):
                pass

    def backend(self):
        if self._backend is None:
            if self.backend_factory is None:
                from ..slurm.cli_backend import CliBackend

                self._backend = CliBackend()
            else:
                self._backend = self.backend_factory()
        return self._backend

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def _on_signal(self, num, frame) -> None:
        self._pending.append(num)  # nothing more: see __init__

    def _take_signals(self) -> list[int]:
        """The signals caught since the last call, oldest first."""
        taken = []
        while self._pending:
            taken.append(self._pending.popleft())
        return taken

    def _send(self, num: int) -> None:
        """Signal the child's whole process group (a shell's children, torchrun's workers)."""
        try:
            os.killpg(self.child.pid, num)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(self.child.pid, num)
            except (ProcessLookupError, PermissionError):
                pass

    def job_times(self) -> tuple[float | None, float | None]:
        """(elapsed, time limit) in seconds from `scontrol show job`; (None, None) when unavailable."""
        assert self.job_id is not None  # the caller asks only in a job
        try:
            raw = self.backend().job(int(self.job_id)).raw
        except Exception as e:  # noqa: BLE001 - logged; the wrapper must outlive a broken controller
            self.log("scontrol-error", error=str(e))
            return None, None
        return parse_duration(raw.get("RunTime", "")), parse_duration(raw.get("TimeLimit", ""))

    # -- the loop --------------------------------------------------------------------------------------------------
    def child_env(self, stop_file: str) -> dict[str, str]:
        env = dict(self.environ)
        env.update(dist_env(self.environ, self.opts.master_port))
        env[ENV_STOP_FILE] = stop_file
        env[ENV_STOP_SIGNAL] = signame(self.ask_signal) if self.ask_signal else ""
        if self.opts.checkpoint_dir:
            env[ENV_CHECKPOINT_DIR] = self.opts.checkpoint_dir
        return env

    def run(self) -> int:
        if not self.argv:
            raise ValueError("no command to run")
        workdir = tempfile.mkdtemp(prefix="slurmkit-run-")
        stop_file = os.path.join(workdir, "stop")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        handled = {self.trigger} | {signum(s) for s in FORWARDED} | {signal.SIGCHLD}
        old = {}
        old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        try:
            for num in handled:
                old[num] = signal.signal(num, self._on_signal)
            return self._run(stop_file)
        finally:
            if getattr(self, "_tee", None) is not None:
                self._tee.join(timeout=5.0)  # the child's last lines reach our stdout (and its last step)
            for num, h in old.items():
                signal.signal(num, h)
            signal.set_wakeup_fd(old_wakeup)
            os.close(self._wake_r)
            os.close(self._wake_w)
            try:
                os.unlink(stop_file)
            except OSError:
                pass
            try:
                os.rmdir(workdir)
            except OSError:
                pass

    def _run(self, stop_file: str) -> int:
        o = self.opts
        repl = None
        if o.checkpoint_dir and o.durable:
            from ..checkpoint.replicate import for_job

            repl = for_job(o, self.environ, self.job_id, self.log)  # restores DEST's newest first (issue 29)
        if o.checkpoint_dir:
            from ..checkpoint import latest

            ck = latest(o.checkpoint_dir)
            if ck is not None:
                self.log("resumed", step=ck.step, checkpoint=ck.path)
            elif self.restarts:
                self.log("resumed", step="none", note="restarted, but no complete checkpoint")
        try:
            tee = self.opts.flops_per_step is not None  # read SLURMKIT_STEP lines only when asked (MFU)
            self.child = subprocess.Popen(
                self.argv,
                env=self.child_env(stop_file),
                start_new_session=True,
                stdout=subprocess.PIPE if tee else None,
            )
            if tee:
                from ..efficiency.steps import tee_step_lines

                self._tee = threading.Thread(
                    target=tee_step_lines, daemon=True, args=(self.child.stdout, self.opts.flops_per_step)
                )
                self._tee.start()
        except OSError as e:
            self.log("child-exit", code=127, error=f"{self.argv[0]}: {e.strerror}")
            return 127
        self.log(
            "start",
            pid=self.child.pid,
            command=" ".join(self.argv),
            signal=signame(self.trigger),
            grace=o.grace,
            max_requeues=o.max_requeues,
        )
        if repl is not None:
            repl.start()
        watcher = None
        if o.imds_endpoint:
            watcher = SpotWatcher(Imds(o.imds_endpoint, o.imds_timeout), o.imds_poll_interval, self._wake, self.log)
            watcher.start()

        asked: str | None = None  # the kind once the child was asked to checkpoint
        decision: Decision | None = None
        deadline: float | None = None
        cancelled = False
        rc: int | None = None
        try:
            while True:
                timeout = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
                try:
                    select.select([self._wake_r], [], [], timeout)
                except InterruptedError:
                    pass
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except (BlockingIOError, InterruptedError):
                    pass
                pending = self._take_signals()
                for num in pending:
                    if num == signal.SIGCHLD:
                        continue
                    if num == self.trigger:
                        self.log("signal", signal=signame(num))
                        if asked:
                            continue
                        if self.child.poll() is not None:
                            break  # it already finished on its own: nothing to checkpoint, no requeue
                        elapsed, limit = self.job_times() if self.job_id else (None, None)
                        kind = classify(elapsed, limit, o.timeout_window)
                        asked, decision, deadline = self._ask(
                            kind, stop_file, time.monotonic() + o.grace, elapsed=elapsed, limit=limit
                        )
                        continue
                    name = signame(num)
                    if name in TERMINATING:
                        cancelled = True
                    if num != signal.SIGCONT:  # Slurm sends CONT with most signals: forward it quietly
                        self.log("signal", signal=name, action="forwarded to the child")
                    self._send(num)
                if watcher is not None and watcher.notice is not None and not asked:
                    n = watcher.notice
                    self.log("spot-notice", action=n["action"], time=n["time"] or "?")
                    if n["epoch"] is not None:
                        left = n["epoch"] - time.time() - o.spot_margin
                        dl = time.monotonic() + max(5.0, left)  # a notice already due: 5 s still
                    else:
                        dl = time.monotonic() + max(0.0, min(o.grace, 120 - o.spot_margin))
                    asked, decision, deadline = self._ask("spot", stop_file, dl)
                rc = self.child.poll()
                if rc is not None:
                    break
                if deadline is not None and decision is not None and decision.requeue and time.monotonic() >= deadline:
                    self.log("grace-expired", grace=o.grace, note="requeueing with the child still running")
                    break
        finally:
            if watcher is not None:
                watcher.stop()
            if repl is not None:
                # the checkpoint the child saved on its way out becomes durable before the requeue (within grace)
                repl.stop(final_timeout=max(5.0, min(o.grace, o.replicate_timeout)))

        if rc is not None:
            self.log("child-exit", code=rc if rc >= 0 else 128 - rc, signal=signame(-rc) if rc < 0 else None)
        code = (128 - rc if rc < 0 else rc) if rc is not None else 1
        if not asked:
            if not (code and self.job_id and not cancelled and "node-fault" in o.requeue_on):
                return code
            asked, decision = self._node_fault(code), None  # issue 29: a GPU fault killed it -> requeue
            if asked is None:
                return code
        final = self._decide(asked, cancelled=cancelled)
        if not final.requeue:
            if decision is None or decision.requeue:  # say it if it changed since the ask
                self.log("no-requeue", reason=final.why)
            return self._finish_child(code) if rc is None else code
        if o.dry_run:
            self.log("no-requeue", reason=final.why, would="scontrol requeue " + str(self.job_id))
            return self._finish_child(code) if rc is None else code
        assert self.job_id is not None  # requeue_decision requeues only a job
        try:
            self.backend().requeue(int(self.job_id))
        except Exception as e:  # noqa: BLE001 - logged; the child's exit code stands
            if not self._requeued_anyway():
                self.log("requeue-failed", error=str(e))
                return self._finish_child(code) if rc is None else code
        self.log("requeued", kind=asked, restart=self.restarts + 1, max_requeues=o.max_requeues)
        self._restart_soon(first=True)
        # Slurm now ends this run (TERM, then KILL). Wait for it rather than exit: the batch script's end must
        # not race the requeue.
        end = time.monotonic() + o.after_requeue_wait
        while time.monotonic() < end:
            pending = self._take_signals()
            if any(signame(p) in TERMINATING for p in pending):
                break
            try:
                select.select([self._wake_r], [], [], 0.5)
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
        self._restart_soon(first=False)
        return code

    def _node_fault(self, code: int) -> str | None:
        """'node-fault' when the child's failure comes with a fault of this node (run/nodefault.py), else None."""
        from .nodefault import decide

        f = decide(code, self.node_probe() if self.node_probe else [])
        self.log("node-fault" if f.fault else "no-node-fault", reason=f.why[:300])
        return "node-fault" if f.fault else None

    def _requeued_anyway(self) -> bool:
        """Slurm's TERM to the step can kill `scontrol requeue` after the controller took the request (the
        requeue ends this run at once): the job record says whether it did."""
        try:
            rec = self.backend().job(int(self.job_id or 0))
        except Exception:  # noqa: BLE001 - unknown: the failure stands
            return False
        return rec.restarts > self.restarts or "REQUEUE" in str(rec.raw.get("JobState", "")) or rec.state == "PENDING"

    def _restart_soon(self, *, first: bool) -> None:
        """Shorten Slurm's hold on the requeued job (BeginTime ~121 s ahead on every version measured) to
        run.restart_delay seconds: the job is pending (still completing) now, and Slurm keeps a start time that
        is still ahead when the requeue completes. Set once right after the requeue and again as this run ends,
        so the delay counts from the end of the batch step (then only the epilog runs before the requeue
        completes)."""
        delay = self.opts.restart_delay
        if not delay or not self.job_id:
            return
        try:
            self.backend().start_in(int(self.job_id), delay)
        except Exception as e:  # noqa: BLE001 - logged; Slurm's own hold stands
            # the first try races Slurm's TERM to the step (it may kill scontrol): only the last one counts
            if not first:
                self.log("restart-delay-failed", error=str(e), note="Slurm's own hold (~2 min) stands")
            return
        if not self._restart_set:
            self._restart_set = True
            self.log("restart-soon", delay=f"{delay}s", note="eligible again this long after this run ends")

    def _decide(self, kind: str, *, cancelled: bool = False) -> Decision:
        """requeue_decision for this job and these options."""
        o = self.opts
        return requeue_decision(
            kind,
            job_id=self.job_id,
            restarts=self.restarts,
            max_requeues=o.max_requeues,
            requeue_on=o.requeue_on,
            leader=self.leader,
            cancelled=cancelled,
            dry_run=o.dry_run,
        )

    def _ask(self, kind: str, stop_file: str, deadline: float, **info):
        decision = self._decide(kind)
        try:
            with open(stop_file, "w") as f:
                f.write(f"{kind}\n")
        except OSError as e:
            self.log("stop-file-error", error=str(e))
        via = None
        if self.ask_signal:
            via = self._send_ask()
        secs = max(0.0, deadline - time.monotonic())
        self.log(
            "checkpoint-asked",
            kind=kind,
            signal=signame(self.ask_signal) if self.ask_signal else "none",
            via=via,
            flag=stop_file,
            wait=f"{secs:.0f}s",
            elapsed=None if info.get("elapsed") is None else f"{info['elapsed']:.0f}s",
            limit=None if info.get("limit") is None else f"{info['limit']:.0f}s",
            then="requeue" if decision.requeue else "no requeue: " + decision.why,
        )
        return kind, decision, deadline

    def _send_ask(self) -> str:
        """Deliver the checkpoint signal. A child that is `srun` would take TERM/INT/QUIT as "kill the step"
        (SIGKILL to every task at once), so the tasks get the signal from Slurm directly instead: `scancel
        --signal=SIG JOBID` reaches every process of the job's steps on every node, not the batch shell, and
        ends nothing. Anything else: the child's process group."""
        assert self.ask_signal is not None  # asked only when there is a checkpoint signal
        if self.child_is_srun and self.job_id:
            try:
                self.backend().signal_steps(int(self.job_id), signame(self.ask_signal))
                return "scancel"
            except Exception as e:  # noqa: BLE001 - logged; srun is signalled directly instead
                self.log("scancel-error", error=str(e), note="signalling srun itself instead")
        self._send(self.ask_signal)
        return "process-group"

    def _finish_child(self, code: int) -> int:
        """No requeue but the child still runs (grace expired): keep waiting for it, forwarding signals."""
        while True:
            rc = self.child.poll()
            if rc is not None:
                code = 128 - rc if rc < 0 else rc
                self.log("child-exit", code=code, signal=signame(-rc) if rc < 0 else None)
                return code
            pending = self._take_signals()
            for num in pending:
                if num not in (signal.SIGCHLD, self.trigger):
                    self._send(num)
            try:
                select.select([self._wake_r], [], [], 1.0)
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
