"""The default Slurm backend: Slurm's own command-line tools, through slurmkit.proc (argv lists, timeouts)."""

from __future__ import annotations

import os
import re
import time

from .. import proc
from ..errors import CommandError, NoAnswer, SlurmkitError
from .records import JobRecord, NodeRecord, parse_scontrol_job_oneliner, parse_scontrol_nodes_oneliner
from .slurm_json import SlurmFormatError, parse_scontrol_nodes_json, parse_sinfo_json


def _major_minor(version: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return repr(text[:200] + ("..." if len(text) > 200 else "")) if text else "an empty answer"


class SlurmError(SlurmkitError):
    """Slurm refused an operation (exit 1), or could not be asked (SlurmNoAnswer, exit 3)."""


class SlurmNoAnswer(SlurmError, NoAnswer):
    """Slurm could not be asked (controller down or unreachable, a tool missing or timed out) or answered a query with
    nothing slurmkit can read: the state is unknown, exit 3. Still a SlurmError, for callers that catch that."""

    exit_code = 3


def _no_answer(e: CommandError) -> bool:
    """Did Slurm not answer at all (rather than refuse)? A timeout, a missing tool, no controller to talk to."""
    out = e.stderr + e.stdout
    return (
        e.timed_out
        or e.missing
        or "Unable to contact slurm controller" in out
        or "Connection refused" in out
        or "Zero Bytes were transmitted" in out
    )


class CliBackend:
    name = "cli"

    def __init__(self, timeout: float = 10.0, bin_dir: str | None = None, say=None):
        self.timeout = timeout
        self.bin_dir = bin_dir
        self._say = say  # -v: a callable that prints a line on stderr
        self._version: str | None = None

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _run(self, argv: list[str], *, input: str | None = None, query: bool = False) -> proc.Result:
        """Run a Slurm tool. A failure is a SlurmNoAnswer (exit 3) when Slurm did not answer, or when `query` (the
        call only reads state: whatever stops it, slurmkit could not find out); else a SlurmError (exit 1)."""
        if self.bin_dir:
            argv = [os.path.join(self.bin_dir, argv[0]), *argv[1:]]
        try:
            return proc.run(argv, timeout=self.timeout, input=input)
        except CommandError as e:
            msg = str(e)
            if e.timed_out:
                msg += " (is slurmctld up? check SLURM_CONF and `scontrol ping`)"
            elif "Unable to contact slurm controller" in (e.stderr + e.stdout):
                msg = f"{os.path.basename(argv[0])}: unable to contact the Slurm controller (is slurmctld up?)"
            raise (SlurmNoAnswer if query or _no_answer(e) else SlurmError)(msg) from e

    # -- queries ---------------------------------------------------------------------------------------------------
    def version(self) -> str:
        if self._version is None:
            out = self._run(["sinfo", "--version"], query=True).stdout.strip()  # "slurm 22.05.8" / "slurm-wlm 22.05.8"
            m = re.search(r"(\d+\.\d+(?:\.\d+)?)", out)
            self._version = m.group(1) if m else out
        return self._version

    def node_source(self) -> tuple[list[str], str]:
        """(argv, why) of the command that lists nodes on this Slurm, chosen by `sinfo --version`:
        23.02+ `scontrol --json -d show node` (one record per node; their `sinfo --json` groups nodes and keeps one
        reason per group), 21.08/22.05 `sinfo --json` (one record per node), older `scontrol -o -d show node`."""
        v = self.version()
        mm = _major_minor(v)
        if mm is None:
            raise SlurmNoAnswer(f"sinfo --version printed {v!r}: expected a Slurm version like 'slurm 24.11.5'")
        if mm >= (23, 2):
            return ["scontrol", "--json", "-d", "show", "node"], f"Slurm {v}: scontrol --json"
        if mm >= (21, 8):
            return ["sinfo", "--json"], f"Slurm {v}: sinfo --json (one record per node before 23.02)"
        return ["scontrol", "-o", "-d", "show", "node"], f"Slurm {v}: no --json before 21.08"

    def nodes(self, names: str | None = None) -> list[NodeRecord]:
        """All nodes (or those in the hostlist `names`). A controller that does not answer, answers with no nodes, or
        with a document slurmkit does not read, is a SlurmNoAnswer that says what it got (exit 3: could not find
        out), never an empty list."""
        if names:
            named = self._named_nodes(names)
            if named is not None:
                return named
        argv, why = self.node_source()
        cmd = " ".join(argv)
        if self._say:
            self._say(f"nodes from `{cmd}` ({why})")
        res = self._run(argv, query=True)
        try:
            if argv[1] == "-o":
                records = parse_scontrol_nodes_oneliner(res.stdout)
                if not records:
                    raise SlurmFormatError(
                        f"{cmd} (Slurm {self.version()}): no NodeName= lines in "
                        f"{_excerpt(res.stdout + res.stderr)}; expected one line per node"
                    )
            elif argv[0] == "sinfo":
                records = parse_sinfo_json(res.stdout, cmd)
            else:
                records = parse_scontrol_nodes_json(res.stdout, cmd)
        except SlurmFormatError as e:  # an answer slurmkit cannot read (or none: slurmctld down) says nothing
            raise SlurmNoAnswer(str(e)) from None
        if names:
            from . import expand_hostlist

            wanted = set(expand_hostlist(names))
            records = [r for r in records if r.name in wanted]
        return records

    def _named_nodes(self, names: str) -> list[NodeRecord] | None:
        """Only the nodes in `names` (a hook asks about its own node on every job): `scontrol -o -d show node NAMES`,
        one line per node on every Slurm version, so neither `sinfo --version` first nor the whole cluster's
        listing. None when Slurm says a name is not a node: the full listing then answers (without it)."""
        try:
            records = self._oneline(["scontrol", "-o", "-d", "show", "node", names])
        except SlurmError as e:
            cause = e.__cause__
            if isinstance(cause, CommandError) and "not found" in cause.stderr + cause.stdout:
                return None
            raise
        from . import expand_hostlist

        wanted = set(expand_hostlist(names))
        return [r for r in records if r.name in wanted]

    def nodes_for_check(self) -> list[NodeRecord]:
        """Every node, for the cluster check before sbatch (jobs/check.py reads a node's name, partitions, Gres,
        CPUs and state flags): `scontrol -o -d show node`, the one-node lookup's command, which prints those alike
        on every Slurm version, so one Slurm call per submit and no `sinfo --version` first. nodes() reads the
        version's JSON instead, for the reasons and times `slurmkit nodes` and audit show. An answer with no
        NodeName= lines (none, or one slurmkit does not read) is a SlurmNoAnswer that says what it got."""
        return self._oneline(["scontrol", "-o", "-d", "show", "node"])

    def _oneline(self, argv: list[str]) -> list[NodeRecord]:
        cmd = " ".join(argv)
        if self._say:
            self._say(f"nodes from `{cmd}`")
        res = self._run(argv, query=True)
        records = parse_scontrol_nodes_oneliner(res.stdout)
        if not records:
            raise SlurmNoAnswer(
                f"{cmd}: no NodeName= lines in {_excerpt(res.stdout + res.stderr)}; expected one line per node"
            )
        return records

    def job(self, job_id: int) -> JobRecord:
        res = self._run(["scontrol", "-o", "show", "job", str(int(job_id))])
        return parse_scontrol_job_oneliner(res.stdout)

    # -- actions ---------------------------------------------------------------------------------------------------
    def submit(self, script: str, args: list[str] | tuple[str, ...] = ()) -> int:
        """sbatch the script text (on stdin); return the job id."""
        res = self._run(["sbatch", "--parsable", *args], input=script)
        first = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        m = re.match(r"^(\d+)", first)
        if not m:
            raise SlurmError(f"sbatch printed no job id: {res.stdout.strip()!r} {res.stderr.strip()!r}")
        return int(m.group(1))

    def drain(self, nodes: str, reason: str) -> None:
        if not reason.strip():
            raise SlurmError("a drain needs a reason")
        self._run(["scontrol", "update", f"NodeName={nodes}", "State=DRAIN", f"Reason={reason}"])

    def reboot(self, nodes: str, reason: str) -> None:
        """`scontrol reboot reason=...` of a drained idle node (remediation's): Slurm reboots it (RebootProgram) and
        it comes back still drained, with this reason, for slurmkit to resume once its recheck passes. Not ASAP
        and no nextstate: with either, Slurm clears the drain at registration and the node takes jobs before its
        recheck (issue 28.8, measured on 22.05 and 24.11)."""
        if not reason.strip():
            raise SlurmError("a reboot needs a reason")
        self._run(["scontrol", "reboot", f"reason={reason}", nodes])

    def resume(self, nodes: str) -> None:
        self._run(["scontrol", "update", f"NodeName={nodes}", "State=RESUME"])

    def requeue(self, job_id: int, hold: bool = False, start_now: bool = False) -> None:
        """Requeue a job. Slurm holds a requeued batch job back with a BeginTime a while ahead; `start_now`
        clears that so it can start again as soon as resources allow."""
        self._run(["scontrol", "requeuehold" if hold else "requeue", str(int(job_id))])
        if start_now and not hold:
            # The requeue completes asynchronously (the job goes through COMPLETING first): set the start time
            # once it is pending again, or Slurm's own BeginTime wins. Not `now`: slurmd revokes the old run's
            # credential by the second and kills a restart within that second ("Job credential revoked").
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if self.job(job_id).state == "PENDING":
                    self._run(["scontrol", "update", f"JobId={int(job_id)}", "StartTime=now+2"])
                    return
                time.sleep(0.1)
            raise SlurmError(f"job {job_id} was requeued but did not turn PENDING within {self.timeout:g}s")

    def start_in(self, job_id: int, seconds: int) -> None:
        """Make a pending (or requeued, still completing) job eligible `seconds` from now: `scontrol update
        JobId=N StartTime=now+S`. The job's owner may do this. Slurm keeps a start time still ahead when the
        requeue completes; one already past is replaced by its own hold (the credential lifetime, ~121 s)."""
        self._run(["scontrol", "update", f"JobId={int(job_id)}", f"StartTime=now+{max(0, int(seconds))}"])

    def cancel(self, job_id: int) -> None:
        self._run(["scancel", str(int(job_id))])

    def signal_steps(self, job_id: int, sig: str) -> None:
        """Send `sig` (a name: TERM, USR2) to every process of the job's steps (srun tasks on all nodes), not to
        the batch shell, and without ending anything: `scancel --signal=SIG JOBID`."""
        name = sig.upper().removeprefix("SIG")
        if not name.isalnum():
            raise SlurmError(f"bad signal name {sig!r}")
        self._run(["scancel", f"--signal={name}", str(int(job_id))])
