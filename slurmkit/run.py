"""`slurmkit run`: the job wrapper that makes a job survive timeouts, preemption and spot reclaims.

Inside an sbatch script (submitted with `--signal=B:USR2@LEAD --requeue`):

    exec slurmkit run --checkpoint-dir /ckpt -- python train.py

The wrapper starts the command as a child (in its own process group), forwards TERM/INT/HUP/QUIT/USR1 (and USR2
when it is not the trigger) to that group, and on the trigger signal (USR2) or an AWS spot interruption notice:

1. decides what happened: a timeout when the time left is under `run.timeout_window` or past 80% of the limit
   (submitit's rule, from `scontrol show job`'s RunTime and TimeLimit), else a preemption; a spot notice is its
   own kind;
2. asks the child to checkpoint: creates $SLURMKIT_STOP_FILE and sends `run.checkpoint_signal` (TERM) to its
   process group; when the child is `srun` (which would turn a TERM into SIGKILL for every task), to every
   task of the job's steps through `scancel --signal=TERM JOBID` instead;
3. waits until the child exits, at most `run.grace` seconds (for a spot notice: until the announced time less
   `run.spot_margin`);
4. requeues the job with `scontrol requeue` if the kind is in `run.requeue_on`, SLURM_RESTART_COUNT is below
   `run.max_requeues`, this is task 0 (SLURM_PROCID) and nobody cancelled the job meanwhile (a TERM/INT from
   outside: scancel, the time limit).

A child that exits on its own before any of that is never requeued. The wrapper exits with the child's exit code
(128+N when a signal N killed it). Every event is one line on stderr:

    slurmkit run: 2026-11-30T09:40:00Z job=12 restart=0 event=signal signal=SIGUSR2

Events: start, resumed (step=N, with --checkpoint-dir), signal, checkpoint-asked, spot-notice, child-exit,
grace-expired, requeued, no-requeue, requeue-failed, imds-error.

For multi-node jobs the child gets MASTER_ADDR (first node of SLURM_JOB_NODELIST), MASTER_PORT, WORLD_SIZE and,
when the wrapper runs as a task of a step (`srun slurmkit run -- ...`), RANK, LOCAL_RANK and NODE_RANK; variables
already set are left alone.

The decisions are pure functions (classify, requeue_decision, dist_env, parse_instance_action); the loop in
`Runner` is the imperative shell.
"""

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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from collections.abc import Callable

from .duration import duration_or_none as parse_duration
from .signals import signame, signum
from .checkpoint import ENV_CHECKPOINT_DIR, ENV_STOP_FILE, ENV_STOP_SIGNAL

FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT")
TERMINATING = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


# --- pure decisions --------------------------------------------------------------------------------------------


def classify(elapsed: float | None, limit: float | None, window: float = 600.0, fraction: float = 0.8) -> str:
    """'timeout' or 'preemption' for a trigger signal at `elapsed` seconds into a job of time limit `limit`.

    As submitit does: a job past min(fraction * limit, limit - window) has timed out; a signal before that
    came from a preemption (PreemptParameters=send_user_signal). No limit (UNLIMITED): a preemption. Unknown
    elapsed time: 'unknown'."""
    if limit is None:
        return "preemption"
    if elapsed is None:
        return "unknown"
    guaranteed = min(limit * fraction, limit - window)
    return "timeout" if elapsed >= guaranteed else "preemption"


@dataclass(frozen=True)
class Decision:
    requeue: bool
    why: str


def requeue_decision(
    kind: str,
    *,
    job_id: str | None,
    restarts: int,
    max_requeues: int,
    requeue_on: list[str],
    leader: bool,
    cancelled: bool = False,
    dry_run: bool = False,
) -> Decision:
    """Whether the wrapper should requeue after asking its child to checkpoint."""
    if not job_id:
        return Decision(False, "not a Slurm job (no SLURM_JOB_ID)")
    if not leader:
        return Decision(False, "not task 0: task 0 requeues the job")
    if cancelled:
        return Decision(False, "the job was cancelled or hit its time limit (TERM from outside)")
    effective = "preemption" if kind == "unknown" else kind
    if effective not in requeue_on:
        return Decision(False, f"{kind} is not in run.requeue_on ({', '.join(requeue_on) or 'empty'})")
    if restarts >= max_requeues:
        return Decision(False, f"requeue limit reached: SLURM_RESTART_COUNT={restarts} >= max_requeues={max_requeues}")
    return Decision(
        True,
        f"{kind}, restart {restarts + 1} of at most {max_requeues}" + (" (dry run: not requeueing)" if dry_run else ""),
    )


def dist_env(environ: dict[str, str], master_port: int | None = None) -> dict[str, str]:
    """Variables torch.distributed & co expect, derived from Slurm's; ones already in `environ` are kept."""
    out: dict[str, str] = {}
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if nodelist:
        from .slurm import expand_hostlist

        try:
            nodes = expand_hostlist(nodelist)
        except Exception:  # noqa: BLE001 - an unreadable nodelist: no MASTER_ADDR, the launcher says so
            nodes = []
        if nodes:
            out["MASTER_ADDR"] = nodes[0]
    job_id = environ.get("SLURM_JOB_ID", "")
    if master_port:
        out["MASTER_PORT"] = str(master_port)
    elif job_id.isdigit():
        out["MASTER_PORT"] = str(20000 + int(job_id) % 20000)
    world = environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS") or environ.get("SLURM_NNODES")
    if world:
        out["WORLD_SIZE"] = world
    if environ.get("SLURM_STEP_ID") is not None and environ.get("SLURM_PROCID") is not None:
        # one wrapper per task (srun slurmkit run ...): this task's ranks. Not in the batch step, where they
        # would leak into every task that `srun` starts from it.
        for ours, theirs in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID"), ("NODE_RANK", "SLURM_NODEID")):
            if environ.get(theirs) is not None:
                out[ours] = environ[theirs]
    return {k: v for k, v in out.items() if k not in environ}


def parse_instance_action(text: str) -> dict:
    """AWS spot/instance-action JSON -> {'action': 'terminate', 'time': '...', 'epoch': float | None}."""
    try:
        data = json.loads(text)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    when = str(data.get("time", ""))
    epoch = None
    if when:
        try:
            epoch = datetime.strptime(when.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            epoch = None
    return {"action": str(data.get("action", "unknown")), "time": when, "epoch": epoch}


# --- AWS IMDSv2 -------------------------------------------------------------------------------------------------


class ImdsError(Exception):
    pass


class Imds:
    """The two IMDSv2 calls a spot watcher needs: PUT a session token, GET spot/instance-action with it."""

    TOKEN_PATH = "/latest/api/token"
    ACTION_PATH = "/latest/meta-data/spot/instance-action"

    def __init__(self, endpoint: str, timeout: float = 2.0, ttl: int = 21600):
        import urllib.request

        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.ttl = ttl
        self._token: str | None = None
        self._token_expiry = 0.0
        # never through a proxy: IMDS is link-local and an http_proxy in the job's environment would break it
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, ""
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ImdsError(f"{method} {self.endpoint}{path}: {getattr(e, 'reason', e)}") from None

    def token(self) -> str:
        if self._token and time.monotonic() < self._token_expiry:
            return self._token
        status, body = self._request("PUT", self.TOKEN_PATH, {"X-aws-ec2-metadata-token-ttl-seconds": str(self.ttl)})
        if status != 200 or not body.strip():
            raise ImdsError(f"PUT {self.endpoint}{self.TOKEN_PATH}: HTTP {status}")
        self._token = body.strip()
        self._token_expiry = time.monotonic() + max(1, self.ttl - 60)
        return self._token

    def instance_action(self) -> dict | None:
        """The pending spot interruption (parse_instance_action's dict), or None (HTTP 404: no notice)."""
        for attempt in (1, 2):
            status, body = self._request("GET", self.ACTION_PATH, {"X-aws-ec2-metadata-token": self.token()})
            if status == 404:
                return None
            if status == 200:
                return parse_instance_action(body)
            if status == 401 and attempt == 1:  # token expired or revoked: get a new one, once
                self._token = None
                continue
            raise ImdsError(f"GET {self.endpoint}{self.ACTION_PATH}: HTTP {status}")
        return None


class SpotWatcher(threading.Thread):
    """Polls IMDS every `interval` seconds; on a notice stores it and calls `wake()` once."""

    def __init__(self, imds: Imds, interval: float, wake: Callable[[], None], log: Callable[..., None]):
        super().__init__(name="slurmkit-spot-watcher", daemon=True)
        self.imds = imds
        self.interval = interval
        self.wake = wake
        self.log = log
        self.notice: dict | None = None
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                notice = self.imds.instance_action()
                if failing:
                    self.log("imds-ok", endpoint=self.imds.endpoint)
                failing = False
            except ImdsError as e:
                if not failing:  # one line when it starts failing, not one per poll
                    self.log("imds-error", error=str(e))
                failing = True
                notice = None
            if notice is not None:
                self.notice = notice
                self.wake()
                return
            self._stop.wait(self.interval)


# --- the wrapper ------------------------------------------------------------------------------------------------


@dataclass
class RunOptions:
    signal: str = "USR2"
    checkpoint_signal: str = "TERM"  # or "none"
    grace: float = 60.0
    max_requeues: int = 10
    requeue_on: list[str] = field(default_factory=lambda: ["timeout", "preemption", "spot"])
    timeout_window: float = 600.0
    master_port: int | None = None
    imds_endpoint: str | None = None
    imds_poll_interval: float = 5.0
    imds_timeout: float = 2.0
    spot_margin: float = 15.0
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
            )
        }
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    ):
        self.argv = list(argv)
        self.opts = opts
        self.environ = dict(os.environ if environ is None else environ)
        self.backend_factory = backend_factory
        self.stream = stream or sys.stderr
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
        self._pending: list[int] = []
        self._lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._backend = None

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
                from .slurm.cli_backend import CliBackend

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
        with self._lock:
            self._pending.append(num)

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
        if o.checkpoint_dir:
            from .checkpoint import latest

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
                from .efficiency.steps import tee_step_lines

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
                with self._lock:
                    pending, self._pending = self._pending, []
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

        if rc is not None:
            self.log("child-exit", code=rc if rc >= 0 else 128 - rc, signal=signame(-rc) if rc < 0 else None)
        code = (128 - rc if rc < 0 else rc) if rc is not None else 1
        if not asked:
            return code
        final = requeue_decision(
            asked,
            job_id=self.job_id,
            restarts=self.restarts,
            max_requeues=o.max_requeues,
            requeue_on=o.requeue_on,
            leader=self.leader,
            cancelled=cancelled,
            dry_run=o.dry_run,
        )
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
            self.log("requeue-failed", error=str(e))
            return self._finish_child(code) if rc is None else code
        self.log("requeued", kind=asked, restart=self.restarts + 1, max_requeues=o.max_requeues)
        # Slurm now ends this run (TERM, then KILL). Wait for it rather than exit: the batch script's end must
        # not race the requeue.
        end = time.monotonic() + o.after_requeue_wait
        while time.monotonic() < end:
            with self._lock:
                pending, self._pending = self._pending, []
            if any(signame(p) in TERMINATING for p in pending):
                break
            try:
                select.select([self._wake_r], [], [], 0.5)
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
        return code

    def _ask(self, kind: str, stop_file: str, deadline: float, **info):
        o = self.opts
        decision = requeue_decision(
            kind,
            job_id=self.job_id,
            restarts=self.restarts,
            max_requeues=o.max_requeues,
            requeue_on=o.requeue_on,
            leader=self.leader,
            dry_run=o.dry_run,
        )
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
            with self._lock:
                pending, self._pending = self._pending, []
            for num in pending:
                if num not in (signal.SIGCHLD, self.trigger):
                    self._send(num)
            try:
                select.select([self._wake_r], [], [], 1.0)
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
