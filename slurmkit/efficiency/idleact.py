"""The idle policy (issue 34), the edge: what the sampler does once idlepolicy.decide() says so. It reads the
job's record from Slurm (only once a notice is due: a busy job costs nothing), appends the notice to the job's
stdout file AS THE JOB'S USER (a child of that uid, O_NOFOLLOW, regular files only), runs the site's notice
command (an argv list, never a shell string), and cancels or requeues the job with the reason in its Comment.
Every step is one record in the health log (check `idle_policy`, context `efficiency`), which `slurmkit report
idle` shows. Every external call has a timeout (proc.run). Standard library only.
"""

from __future__ import annotations

import os
import sys

from .. import healthlog, proc
from ..errors import CommandError
from .idlepolicy import (
    ACTED,
    EXEMPT,
    NONE,
    NOTICED,
    VERB,
    IdleRuns,
    action_for,
    action_reason,
    decide,
    exempt_reason,
    notice_text,
)

CHECK = "idle_policy"
# the child that appends the notice, run as the job's user: coreutils' dd (any user can run it, where the
# sampler's own interpreter may live under /root), appending, never creating, never following a link in the last
# path component, never blocking on a FIFO without a reader, never taking a terminal
APPEND = ("dd", "oflag=append,nofollow,nonblock,noctty", "conv=notrunc,nocreat", "status=none")


def parse_job(text: str) -> dict:
    """`scontrol -o show job ID` -> the facts the policy needs (pure)."""
    from ..slurm.records import parse_kv_line

    line = next((ln for ln in text.splitlines() if "JobId=" in ln), "")
    kv = parse_kv_line(line, tail_keys=())
    if not kv.get("JobId"):
        raise ValueError(f"no JobId= in scontrol's answer: {text.strip()[:200]!r}")

    def ident(key: str) -> tuple[str, int | None]:
        v = kv.get(key, "")  # "alice(1001)"
        name, _, num = v.partition("(")
        num = num.rstrip(")")
        return name, int(num) if num.isdigit() else None

    user, uid = ident("UserId")
    _, gid = ident("GroupId")
    nodes = kv.get("NumNodes", "")
    num_nodes = int(nodes.split("-")[0]) if nodes.split("-")[0].isdigit() else None
    out = kv.get("StdOut", "")
    return {
        "job_id": int(kv["JobId"]) if kv["JobId"].isdigit() else kv["JobId"],
        "state": kv.get("JobState", ""),
        "user": user or None,
        "uid": uid,
        "gid": gid,
        "account": _val(kv.get("Account")),
        "partition": _val(kv.get("Partition")),
        "num_nodes": num_nodes,
        "stdout": out if out.startswith("/") else None,
        "restarts": int(kv["Restarts"]) if kv.get("Restarts", "").isdigit() else None,
        "comment": _val(kv.get("Comment")),
    }


def comment_with(existing: str | None, reason: str) -> str:
    """The job's Comment with the policy's reason after what the user wrote there (never over it)."""
    return f"{existing}; {reason}" if existing else reason


def _val(v: str | None) -> str | None:
    return None if not v or v in ("(null)", "N/A") else v


class Actor:
    """One job's policy on one node: its stage, its job record once read, and the edge calls. `cfg` is what the
    prolog passed the sampler (`--idle-policy`, JSON): the idle_policy section, the health log and Slurm's tools."""

    def __init__(self, cfg: dict, job_id: int, node: str, gpus: list[int], say=None) -> None:
        from ..settings import IdlePolicySettings

        self.policy = IdlePolicySettings(**cfg["policy"])
        self.log = cfg["health_log"]
        self.log_max_bytes = int(cfg.get("log_max_bytes") or healthlog.DEFAULT_MAX_BYTES)
        self.log_generations = int(cfg.get("log_generations") or healthlog.DEFAULT_GENERATIONS)
        self.bin_dir = cfg.get("slurm_bin_dir") or None
        self.job_id, self.node, self.gpus = int(job_id), node, list(gpus)
        self.stage = NONE
        self.job: dict | None = None
        self.unknown_said = False
        self.say = say or (lambda msg: print(f"slurmkit idle policy: {msg}", file=sys.stderr))

    def runs(self) -> IdleRuns:
        return IdleRuns(self.gpus, self.policy.util_pct)

    # -- the step the sampler's policy thread takes every tick ---------------------------------------------------
    def step(self, runs: IdleRuns) -> str:
        idle = runs.idle_seconds()
        what = decide(self.policy, idle, self.stage)
        if what == "reset":
            self.stage = NONE
            return what
        if what == "none" or idle is None:
            return "none"
        job = self._job()
        if job is None:
            return "unknown"
        if job.get("state") != "RUNNING":
            return "none"  # completing, requeued, suspended: nothing to do to it now
        why = exempt_reason(self.policy, job)
        if why:
            self.stage = EXEMPT
            self._record("skip", f"idle {idle:.0f} s, left alone: {why}", "exempt", idle, job)
            return "exempt"
        act = action_for(self.policy, job)
        if what == "notice":
            ev = self._notice(job, idle, act)
            self.stage = NOTICED
            text = notice_text(self.policy, self.job_id, self.node, self.gpus, idle, act)
            self._record("warn", text, "noticed", idle, job, ev)
            return "noticed"
        ev = self._notice(job, idle, act) if self.stage == NONE else {}
        reason = action_reason(self.policy, idle, act)
        ev.update(self._act(reason, act, job.get("comment")))
        self.stage = ACTED
        action = VERB[act] if not ev.get("error") else f"{act}-failed"
        self._record("warn", reason, action, idle, job, ev)
        return action

    # -- the edge ------------------------------------------------------------------------------------------------
    def _slurm(self, *argv: str) -> proc.Result:
        tool = os.path.join(self.bin_dir, argv[0]) if self.bin_dir else argv[0]
        return proc.run([tool, *argv[1:]], timeout=self.policy.command_timeout)

    def _job(self) -> dict | None:
        """The job's record (read once; the state is read again before an action). None: Slurm did not answer,
        and the policy does nothing this tick (said once in the health log)."""
        try:
            job = parse_job(self._slurm("scontrol", "-o", "show", "job", str(self.job_id)).stdout)
        except (CommandError, ValueError) as e:
            if not self.unknown_said:
                self.unknown_said = True
                rec = healthlog.record(
                    check=CHECK,
                    status="warn",
                    reason=f"idle, but the job record could not be read: {e}",
                    context="efficiency",
                    node=self.node,
                    job_id=self.job_id,
                    action="none",
                )
                self._append(rec)
            return None
        self.job = job
        return job

    def _notice(self, job: dict, idle: float, act: str) -> dict:
        text = notice_text(self.policy, self.job_id, self.node, self.gpus, idle, act)
        ev: dict = {}
        if self.policy.notice_job_output:
            ev["job_output"] = self._append_as_user(job, text)
        if self.policy.notice_command:
            ev["notice_command"] = self._command(job, idle, act)
        return ev

    def _append_as_user(self, job: dict, text: str) -> str:
        path, uid, gid, user = job.get("stdout"), job.get("uid"), job.get("gid"), job.get("user")
        if not path:
            return "no output file (an interactive job, or Slurm did not say)"
        if uid is None or gid is None or not user:
            return "not written: the job's user is unknown"
        try:
            groups = os.getgrouplist(user, gid)
        except OSError:
            groups = [gid]
        try:
            r = proc.run(
                [*APPEND, f"of={path}"],
                input=text + "\n",
                timeout=self.policy.command_timeout,
                check=False,
                as_user=(uid, gid, groups),
                cwd="/",
            )
        except CommandError as e:
            return f"not written: {e}"
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            return f"not written: {last}"
        return f"appended to {path}"

    def _command(self, job: dict, idle: float, act: str) -> dict:
        fill = {
            "job_id": str(self.job_id),
            "user": job.get("user") or "",
            "account": job.get("account") or "",
            "partition": job.get("partition") or "",
            "node": self.node,
            "idle_seconds": f"{idle:.0f}",
            "action": act,
            "action_after": f"{self.policy.action_after:g}",
        }
        try:
            argv = [a.format(**fill) for a in self.policy.notice_command]  # each stays one argument
        except (KeyError, IndexError, ValueError) as e:
            return {"error": f"idle_policy.notice_command: bad placeholder {e}"}
        try:
            r = proc.run(argv, timeout=self.policy.command_timeout, check=False)
            return {"argv": argv, "returncode": r.returncode}
        except CommandError as e:
            return {"argv": argv, "error": str(e)}

    def _act(self, reason: str, act: str, comment: str | None = None) -> dict:
        ev: dict = {"reason": reason}
        jid = str(self.job_id)
        try:  # the reason in Slurm's own record first: whoever looks at the job sees who ended it and why
            self._slurm("scontrol", "update", f"JobId={jid}", f"Comment={comment_with(comment, reason)}")
            ev["comment"] = "set"
        except CommandError as e:
            ev["comment"] = f"not set: {e}"
        try:
            if act == "cancel":
                self._slurm("scancel", jid)
            else:
                self._slurm("scontrol", "requeue", jid)
        except CommandError as e:
            ev["error"] = str(e)
        return ev

    def _record(self, status: str, reason: str, action: str, idle: float, job: dict, ev: dict | None = None) -> None:
        evidence = {"idle_seconds": round(idle, 3), "gpus": self.gpus, "util_pct": self.policy.util_pct}
        evidence.update(ev or {})
        rec = healthlog.record(
            check=CHECK,
            status=status,
            reason=reason,
            evidence=evidence,
            context="efficiency",
            node=self.node,
            job_id=self.job_id,
            action=action,
            user=job.get("user"),
            account=job.get("account"),
            partition=job.get("partition"),
        )
        self._append(rec)

    def _append(self, rec: dict) -> None:
        try:
            healthlog.append(self.log, rec, max_bytes=self.log_max_bytes, keep=self.log_generations)
        except OSError as e:  # loud: in the sampler's file (the job's efficiency record shows it), never silent
            self.say(f"health log not written: {e}: {rec.get('action')}")
