"""Jobs as Slurm reports them: pure parsers of squeue, sacct and `scontrol -o show job` output, and of the event
lines `slurmkit run` writes into a job's output. Nothing here runs a command (slurmkit/jobs/handle.py does).

    squeue -h -r -t all -O <SQUEUE_FORMAT>      -> parse_squeue(text)
    sacct -n -P -X -o <SACCT_FIELDS> -j ID      -> parse_sacct(text)
    scontrol -o show job ID                     -> parse_scontrol_jobs(text)   (records.parse_kv_line per line)
"""

from __future__ import annotations

import re
from ..record import Record, asdict

from .records import parse_kv_line

# Job states that do not change any more (a requeued job goes back to PENDING; PREEMPTED and NODE_FAIL may be
# followed by a requeue, so they end a job only while no requeue follows: the caller asks again).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "NODE_FAIL",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
# the final states no requeue can follow: a handle keeps them without asking Slurm again
SETTLED_STATES = FINAL_STATES - {"NODE_FAIL", "PREEMPTED", "SPECIAL_EXIT"}

# squeue -O fields, `|`-separated with no width limit; the job name (free text, may hold `|`) comes last
SQUEUE_FIELDS = (
    "JobID",
    "ArrayJobID",
    "ArrayTaskID",
    "UserName",
    "State",
    "Reason",
    "NodeList",
    "NumNodes",
    "TimeUsed",
    "TimeLimit",
    "tres-per-node",
    "RestartCnt",
    "exit_code",
    "Partition",
    "STDOUT",
    "STDERR",
    "Name",
)
SQUEUE_FORMAT = ",".join(f"{f}:0|" if f != SQUEUE_FIELDS[-1] else f"{f}:0" for f in SQUEUE_FIELDS)

SACCT_FIELDS = ("JobID", "User", "State", "ExitCode", "NodeList", "NNodes", "Elapsed", "Partition", "JobName")

# what Slurm prints for a job id it does not know (any more): not an error of the query
NOT_FOUND_RE = re.compile(r"Invalid job id specified", re.I)
# sacct on a cluster without slurmdbd (AccountingStorageType=accounting_storage/none)
NO_ACCOUNTING_RE = re.compile(r"accounting storage is disabled", re.I)


class JobStatus(Record, kw_only=False):
    """One job (or one array task) as Slurm last reported it."""

    id: str  # "123", or "120_3" for an array task
    job_id: int  # Slurm's own number for this job (an array task has one too)
    state: str = "UNKNOWN"
    name: str = ""
    user: str = ""
    reason: str = ""
    nodes: str = ""
    num_nodes: int = 0
    gpus_per_node: int = 0
    elapsed: str = ""
    time_limit: str = ""
    restarts: int = 0
    exit_code: int | None = None  # the exit status of the batch script, once the job ended
    exit_signal: int | None = None  # the signal that ended it, if one did
    partition: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    stdout: str | None = None  # the expanded paths (scontrol) or None where Slurm did not say
    stderr: str | None = None
    source: str = ""  # squeue, sacct or scontrol

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * max(self.num_nodes, 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gpus"] = self.gpus
        return d


def _int(text: str, default: int | None = None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() else default


def gpus_from_tres(text: str) -> int:
    """GPUs per node in a TRES-per-node string: 'gres:gpu:2' (22.05), 'gres/gpu:2' (23.02+), 'gres/gpu=2',
    'gres:gpu:h100:4' -> 2, 2, 2, 4; 'N/A' or none -> 0."""
    total = 0
    for item in (text or "").split(","):
        m = re.match(r"^gres[:/]gpu(?::[^:=]+)?[:=](\d+)$", item.strip())
        if m:
            total += int(m.group(1))
        elif re.match(r"^gres[:/]gpu$", item.strip()):
            total += 1
    return total


def job_id_text(job_id: int, array_job_id: int | None, array_task_id: int | None) -> str:
    """The id a user types: '120_3' for an array task, '123' for a job."""
    if array_task_id is not None and array_job_id is not None:
        return f"{array_job_id}_{array_task_id}"
    return str(job_id)


def split_exit(raw: str) -> tuple[int | None, int | None]:
    """squeue's exit_code (a wait status: 768 = exit 3, 9 = signal 9) -> (exit code, signal)."""
    n = _int(raw)
    if n is None:
        return None, None
    return (n >> 8) & 0xFF, (n & 0x7F) or None


def split_exit_pair(text: str) -> tuple[int | None, int | None]:
    """scontrol/sacct ExitCode 'CODE:SIGNAL' ('3:0', '0:9') -> (3, None), (0, 9)."""
    code, _, sig = (text or "").partition(":")
    c, s = _int(code), _int(sig)
    return c, (s or None)


def parse_squeue(text: str) -> list[JobStatus]:
    """`squeue -h -r -t all -O SQUEUE_FORMAT` output -> one JobStatus per line. A line with fewer fields is a
    ValueError naming the line (squeue printed something else: an error, another format)."""
    out = []
    n = len(SQUEUE_FIELDS)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) != n or not _int(parts[0]):
            raise ValueError(f"squeue line {lineno}: expected {n} '|'-separated fields, got {line[:200]!r}")
        f = dict(zip(SQUEUE_FIELDS, (p.strip() for p in parts)))
        # 22.05 prints the wait status (768: exit 3), 24.11+ CODE:SIGNAL (3:0)
        code, sig = split_exit_pair(f["exit_code"]) if ":" in f["exit_code"] else split_exit(f["exit_code"])
        job_id = int(f["JobID"])
        task = _int(f["ArrayTaskID"])
        array = _int(f["ArrayJobID"]) if task is not None else None
        out.append(
            JobStatus(
                id=job_id_text(job_id, array, task),
                job_id=job_id,
                state=f["State"].split()[0] if f["State"] else "UNKNOWN",
                name=parts[-1],
                user=f["UserName"],
                reason="" if f["Reason"] == "None" else f["Reason"],
                nodes="" if f["NodeList"] in ("", "(null)") else f["NodeList"],
                num_nodes=_int(f["NumNodes"], 0) or 0,
                gpus_per_node=gpus_from_tres(f["tres-per-node"]),
                elapsed=f["TimeUsed"],
                time_limit=f["TimeLimit"],
                restarts=_int(f["RestartCnt"], 0) or 0,
                exit_code=code,
                exit_signal=sig,
                partition=f["Partition"],
                array_job_id=array,
                array_task_id=task,
                source="squeue",
            )
        )
        st = out[-1]
        st.stdout = expand_output_pattern(f["STDOUT"], st) if f["STDOUT"] not in ("", "(null)", "N/A") else None
        # 24.11+ print (null) for a job without --error: its errors go to the output file
        st.stderr = expand_output_pattern(f["STDERR"], st) if f["STDERR"] not in ("", "(null)", "N/A") else st.stdout
    return out


def parse_sacct(text: str) -> list[JobStatus]:
    """`sacct -n -P -X -o SACCT_FIELDS` output (one allocation per line, `|`-separated, the name last)."""
    out = []
    n = len(SACCT_FIELDS)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) != n:
            raise ValueError(f"sacct line {lineno}: expected {n} '|'-separated fields, got {line[:200]!r}")
        f = dict(zip(SACCT_FIELDS, parts))
        m = re.match(r"^(\d+)(?:_(\d+))?$", f["JobID"])
        if not m:  # a pending array range (120_[1-5]) or a step: not one job
            continue
        array = int(m.group(1)) if m.group(2) else None
        task = _int(m.group(2) or "")
        code, sig = split_exit_pair(f["ExitCode"])
        state = f["State"].split()[0] if f["State"] else "UNKNOWN"  # "CANCELLED by 1000"
        out.append(
            JobStatus(
                id=f["JobID"],
                job_id=int(m.group(1)) if task is None else 0,  # sacct's JobID of a task is the array's
                state=state,
                name=f["JobName"],
                user=f["User"],
                nodes="" if f["NodeList"] in ("", "None assigned") else f["NodeList"],
                num_nodes=_int(f["NNodes"], 0) or 0,
                elapsed=f["Elapsed"],
                exit_code=code if state in FINAL_STATES else None,
                exit_signal=sig,
                partition=f["Partition"],
                array_job_id=array,
                array_task_id=task,
                source="sacct",
            )
        )
    return out


def status_from_kv(kv: dict[str, str]) -> JobStatus:
    """One `scontrol -o show job` record (parse_kv_line) -> JobStatus."""
    job_id = int(kv["JobId"])
    task = _int(kv.get("ArrayTaskId", ""))
    array = _int(kv.get("ArrayJobId", "")) if task is not None else None
    state = kv.get("JobState", "UNKNOWN") or "UNKNOWN"
    code, sig = split_exit_pair(kv.get("ExitCode", ""))
    tres = kv.get("TresPerNode", "")
    return JobStatus(
        id=job_id_text(job_id, array, task),
        job_id=job_id,
        state=state,
        name=kv.get("JobName", ""),
        user=kv.get("UserId", "").split("(")[0],
        reason="" if kv.get("Reason") in (None, "None") else kv["Reason"],
        nodes="" if kv.get("NodeList") in (None, "(null)") else kv["NodeList"],
        num_nodes=_int(kv.get("NumNodes", "").split("-")[0], 0) or 0,
        gpus_per_node=gpus_from_tres(tres if tres.startswith("gres") else f"gres:{tres}" if tres else ""),
        elapsed=kv.get("RunTime", ""),
        time_limit=kv.get("TimeLimit", ""),
        restarts=_int(kv.get("Restarts", ""), 0) or 0,
        exit_code=code if state in FINAL_STATES else None,
        exit_signal=sig,
        partition=kv.get("Partition", ""),
        array_job_id=array,
        array_task_id=task,
        stdout=kv.get("StdOut") or None,
        stderr=kv.get("StdErr") or None,
        source="scontrol",
    )


def parse_scontrol_jobs(text: str) -> list[JobStatus]:
    """`scontrol -o show job [ID]` output: one record per line (an array job: one per task)."""
    out = []
    for line in text.splitlines():
        if line.startswith("JobId="):
            out.append(status_from_kv(parse_kv_line(line, tail_keys=())))
    return out


def expand_output_pattern(pattern: str, st: JobStatus) -> str:
    """An sbatch --output pattern (as squeue prints it) with the replacements Slurm makes for a batch job's
    output file: %% %A %a %j %J %u %x (and %N for the first node). Others are left as they are."""

    def sub(m: re.Match) -> str:
        c = m.group(2)
        width = int(m.group(1)) if m.group(1) else 0
        val = {
            "%": "%",
            "A": str(st.array_job_id if st.array_job_id is not None else st.job_id),
            "a": str(st.array_task_id) if st.array_task_id is not None else "4294967294",
            "j": str(st.job_id),
            "J": str(st.job_id),
            "u": st.user,
            "x": st.name,
            "N": (st.nodes.split(",")[0] if st.nodes and "[" not in st.nodes else ""),
        }.get(c)
        if val is None:
            return m.group(0)
        return val.zfill(width) if width and val.isdigit() else val

    return re.sub(r"%(\d*)([%AajJuxN])", sub, pattern)


def pick(job_id: str, records: list[JobStatus]) -> JobStatus | None:
    """The record for `job_id` among a query's answer: the job or array task of that id; for a job array's own
    id (`120`, whose tasks are listed as `120_0`, `120_1`...), array_summary of its tasks."""
    for st in records:
        if st.id == job_id:
            return st
    if job_id.isdigit():
        tasks = [st for st in records if st.array_job_id == int(job_id) and st.array_task_id is not None]
        if tasks:
            return array_summary(int(job_id), tasks)
        for st in records:
            if str(st.job_id) == job_id:
                return st
    return None


_ACTIVE_ORDER = ("RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED", "PENDING")


def array_summary(array_job_id: int, tasks: list[JobStatus]) -> JobStatus:
    """One status for a whole job array: still active while any task is (RUNNING before PENDING); once every
    task ended, COMPLETED if all completed, else the first other end state (its exit code with it)."""
    states = [t.state for t in tasks]
    active = [s for s in states if s not in FINAL_STATES]
    if active:
        state = next((s for s in _ACTIVE_ORDER if s in active), active[0])
        bad = None
    else:
        bad = next((t for t in tasks if t.state != "COMPLETED"), None)
        state = bad.state if bad else "COMPLETED"
    first = tasks[0]
    return JobStatus(
        id=str(array_job_id),
        job_id=array_job_id,
        state=state,
        name=first.name,
        user=first.user,
        nodes=",".join(dict.fromkeys(t.nodes for t in tasks if t.nodes)),
        num_nodes=first.num_nodes,
        gpus_per_node=first.gpus_per_node,
        restarts=max(t.restarts for t in tasks),
        exit_code=None if active else (bad.exit_code if bad else 0),
        exit_signal=None if active or not bad else bad.exit_signal,
        partition=first.partition,
        array_job_id=array_job_id,
        array_task_id=None,
        source=first.source,
    )


# --- what `slurmkit run` said -------------------------------------------------------------------------------------

_RUN_LINE = re.compile(
    r"^slurmkit run: (?P<time>\S+) job=\S+ restart=(?P<restart>\d+) event=(?P<event>[\w-]+)(?P<kv>.*)$"
)
_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def run_events(text: str) -> list[dict]:
    """The `slurmkit run: TIME job=N restart=R event=E k=v ...` lines in a job's output, in order, as dicts
    ({'time', 'restart', 'event', **k=v}). Other lines are ignored."""
    out = []
    for line in text.splitlines():
        m = _RUN_LINE.match(line.strip())
        if not m:
            continue
        d: dict = {"time": m["time"], "restart": int(m["restart"]), "event": m["event"]}
        for k, v in _KV.findall(m["kv"]):
            d[k] = v[1:-1] if v.startswith('"') else v
        out.append(d)
    return out


def event_summary(event: dict) -> str:
    """A run event in a few words: 'resumed step=120', 'requeued', 'signal SIGUSR2'."""
    rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("time", "restart", "event", "job", "checkpoint"))
    return f"{event['event']} {rest}".strip()
