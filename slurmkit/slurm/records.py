"""Node and job records, and pure parsers from Slurm's text/JSON output to them.

Parsers take text and return data; nothing here runs a command. They are tested on real captured output.
"""

from __future__ import annotations

import re
from ..record import Record, asdict, field

# State words Slurm prints (scontrol upper case; sinfo %T long and %t short forms, lower case) -> base + flags.
STATE_WORDS = {
    "idle": ("IDLE", []),
    "mix": ("MIXED", []),
    "mixed": ("MIXED", []),
    "alloc": ("ALLOCATED", []),
    "allocated": ("ALLOCATED", []),
    "down": ("DOWN", []),
    "unk": ("UNKNOWN", []),
    "unknown": ("UNKNOWN", []),
    "futr": ("FUTURE", []),
    "future": ("FUTURE", []),
    "drain": ("IDLE", ["DRAIN"]),
    "drained": ("IDLE", ["DRAIN"]),
    "drng": ("MIXED", ["DRAIN"]),
    "draining": ("MIXED", ["DRAIN"]),
    "fail": ("DOWN", ["FAIL"]),
    "failg": ("ALLOCATED", ["FAIL"]),
    "failing": ("ALLOCATED", ["FAIL"]),
    "maint": ("IDLE", ["MAINTENANCE"]),
    "resv": ("IDLE", ["RESERVED"]),
    "reserved": ("IDLE", ["RESERVED"]),
    "comp": ("IDLE", ["COMPLETING"]),
    "completing": ("IDLE", ["COMPLETING"]),
    "plnd": ("IDLE", ["PLANNED"]),
    "planned": ("IDLE", ["PLANNED"]),
    "boot": ("IDLE", ["REBOOT_ISSUED"]),
    "npc": ("IDLE", ["PERFCTRS"]),
    "pow_dn": ("IDLE", ["POWERED_DOWN"]),
    "pow_up": ("IDLE", ["POWERING_UP"]),
    "inval": ("UNKNOWN", ["INVALID_REG"]),
}
SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWERING_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# The order `scontrol` prints flags in (Slurm's node_state_flags table, slurm_protocol_defs.c): Slurm's JSON lists
# the same flags in another order (['IDLE', 'DRAIN', 'COMPLETING']), so every record puts them in this one and the
# same moment reads the same (IDLE+COMPLETING+DRAIN) from every source. Flags not named here follow, as given.
FLAG_ORDER = {
    f: i
    for i, f in enumerate(
        [
            "CLOUD",
            "COMPLETING",
            "DRAIN",
            "DYNAMIC_FUTURE",
            "DYNAMIC_NORM",
            "INVALID_REG",
            "FAIL",
            "MAINTENANCE",
            "POWER_DOWN",
            "POWER_UP",
            "PERFCTRS",
            "POWERED_DOWN",
            "REBOOT_REQUESTED",
            "REBOOT_ISSUED",
            "RESERVED",
            "RESUME",
            "NOT_RESPONDING",
            "PLANNED",
            "POWERING_UP",
            "POWERING_DOWN",
        ]
    )
}
_REASON_RE = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^\[\]@]+)@(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]\s*$")
_GRES_ITEM_RE = re.compile(r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]+))?(?::(?P<count>\d+))?(?P<rest>\(.*\))?$")


class NodeRecord(Record, kw_only=False):
    """One node as the controller reports it (whichever backend read it)."""

    name: str
    state: str  # base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: list[str] = field(default_factory=list)  # DRAIN, NOT_RESPONDING, MAINTENANCE, REBOOT_REQUESTED ...
    reason: str = ""
    reason_user: str | None = None
    reason_time: str | None = None  # ISO 8601 as Slurm prints it (local time of the controller)
    gres: str = ""
    gres_used: str = ""
    gpus_total: int = 0
    gpus_used: int = 0
    partitions: list[str] = field(default_factory=list)
    cpus: int | None = None
    cpus_alloc: int | None = None
    # when slurmd last booted the node, and when the node was last busy (Slurm moves it on a resume and when the
    # last job leaves): a reason older than both on a node that is not drained is history, not today's cause
    boot_time: str | None = None
    last_busy: str | None = None

    def __post_init__(self) -> None:
        self.flags = sorted(dict.fromkeys(self.flags), key=lambda f: FLAG_ORDER.get(f, len(FLAG_ORDER)))

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def state_text(self) -> str:
        """How sinfo/scontrol would show it: IDLE+DRAIN, DOWN+NOT_RESPONDING..."""
        return "+".join([self.state, *self.flags])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["state_text"] = self.state_text
        return d


class JobRecord(Record, kw_only=False):
    """One job as the controller reports it (whichever backend read it)."""

    job_id: int
    name: str = ""
    state: str = ""  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED ...
    reason: str = ""
    nodes: str = ""  # hostlist expression
    user: str = ""
    exit_code: str = ""
    restarts: int = 0
    partition: str = ""
    raw: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("raw")
        return d


def parse_state(text: str) -> tuple[str, list[str]]:
    """'IDLE+DRAIN' -> ('IDLE', ['DRAIN']); 'idle*' -> ('IDLE', ['NOT_RESPONDING']); 'drng@' -> MIXED+DRAIN+REBOOT."""
    parts = [p for p in text.strip().split("+") if p]
    if not parts:
        return "UNKNOWN", []
    base, flags = "UNKNOWN", []
    for i, word in enumerate(parts):
        suffix: list[str] = []
        while word and word[-1] in SUFFIX_FLAGS:
            suffix.insert(0, SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        if i == 0:
            base, extra = STATE_WORDS.get(word.lower(), (word.upper(), []))
            flags += extra
        else:
            flags.append(word.upper())
        flags += suffix
    return base, list(dict.fromkeys(f for f in flags if f))


def clean_reason(text: str | None) -> str:
    """A reason as Slurm keeps it (no `[user@time]` suffix added): stripped; Slurm's words for none -> ''."""
    text = (text or "").strip()
    return "" if text in ("none", "(null)", "None") else text


def parse_reason(text: str) -> tuple[str, str | None, str | None]:
    """'Kill task failed [root@2024-01-05T10:00:00]' -> ('Kill task failed', 'root', '2024-01-05T10:00:00'): text as
    scontrol/sinfo print it, Slurm's own `[user@time]` suffix last (only that one: a reason may end in another)."""
    text = clean_reason(text)
    if not text:
        return "", None, None
    m = _REASON_RE.match(text)
    if m:
        return m["text"], m["user"], m["time"]
    return text, None, None


NOT_RESPONDING = "Not responding"


def current_reason(rec: NodeRecord) -> tuple[str, str | None, bool]:
    """(the part of the node's reason that explains its state now, an older reason Slurm kept as history or None,
    whether the record's reason user/time belong to that older reason).

    Slurm 24.11/25.11 keep a resumed node's reason on the idle node. When its slurmd then stops, Slurm marks it
    NOT_RESPONDING under that old reason and, once DOWN, appends its own words with a new time
    ("slurmkit:xid79 ... : Not responding"). So on a node that is not drained (a drain's reason is always current)
    the reason is history when Slurm appended " : Not responding" to it, or when the node is not responding and the
    reason is older than its last busy time (Slurm moves it on a resume) or its boot. Times compare as text: Slurm
    prints them all the same way (ISO, the controller's local time)."""
    reason = rec.reason
    if not reason or "DRAIN" in rec.flags or "FAIL" in rec.flags:
        return reason, None, False
    head, sep, tail = reason.rpartition(" : ")
    if sep and head.strip() and tail.strip().lower() == NOT_RESPONDING.lower():
        return tail.strip(), head.strip(), False
    if "NOT_RESPONDING" in rec.flags and rec.reason_time:
        later = [t for t in (rec.last_busy, rec.boot_time) if t]
        if later and rec.reason_time[:19] < max(t[:19] for t in later):
            return NOT_RESPONDING, reason, True
    return reason, None, False


def gres_gpu_count(gres: str) -> int:
    """GPUs in a gres string: 'gpu:8', 'gpu:a100:4(S:0-1)', 'gpu:h100:4,gpu:a100:2', 'gpu:0(IDX:N/A)' -> count."""
    total = 0
    for item in split_gres(gres):
        m = _GRES_ITEM_RE.match(item.strip())
        if not m or m["name"] != "gpu":
            continue
        if m["count"] is not None:
            total += int(m["count"])
        elif m["type"] is not None and m["type"].isdigit():
            total += int(m["type"])
        else:
            total += 1
    return total


def gres_gpu_types(gres: str) -> dict[str, int]:
    """GPUs per type in a gres string: 'gpu:h100:4(S:0-1),gpu:1g.10gb:7' -> {'h100': 4, '1g.10gb': 7}; untyped GPUs
    ('gpu:8') are not in it (gres_gpu_count counts them)."""
    out: dict[str, int] = {}
    for item in split_gres(gres):
        m = _GRES_ITEM_RE.match(item.strip())
        if not m or m["name"] != "gpu" or m["type"] is None or m["type"].isdigit():
            continue
        out[m["type"]] = out.get(m["type"], 0) + (int(m["count"]) if m["count"] is not None else 1)
    return out


def split_gres(gres: str) -> list[str]:
    """Split on commas outside parentheses: 'gpu:2(IDX:0,2),nic:1' -> ['gpu:2(IDX:0,2)', 'nic:1']."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in gres or "":
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return [s for s in (x.strip() for x in out) if s and s not in ("(null)", "N/A")]


# --- scontrol ---------------------------------------------------------------------------------------------------

# A key is a capitalised word (NodeName, CfgTRES, ExtSensorsJoules, ...). Reason and Comment run to the end of the
# record in `scontrol -o` output and may hold anything, so they are cut out before the key=value split.
_KV_RE = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_:]*(?:/[A-Za-z0-9_:]+)?)=")
_TAIL_RE: dict[str, re.Pattern] = {}


def parse_kv_line(line: str, tail_keys: tuple[str, ...] = ("Reason",)) -> dict[str, str]:
    """One `scontrol -o show ...` record -> {key: value}. Values may contain spaces (OS=Linux 5.15 #1 SMP)."""
    tail: dict[str, str] = {}
    for k in tail_keys:
        rx = _TAIL_RE.get(k)
        if rx is None:
            rx = _TAIL_RE[k] = re.compile(rf"(?:^|\s){k}=")
        if k + "=" in line:
            m = rx.search(line)
            if m:
                tail[k] = line[m.end() :].rstrip()
                line = line[: m.start()]
    # split on the keys: [text before the first key, key1, value1, key2, value2, ...] (10k nodes: 3x faster
    # than walking the matches)
    parts = _KV_RE.split(line)
    out = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    out.update(tail)
    return out


def node_from_kv(kv: dict[str, str]) -> NodeRecord:
    state, flags = parse_state(kv.get("State", "UNKNOWN"))
    reason, user, when = parse_reason(kv.get("Reason", ""))
    gres = kv.get("Gres", "")
    gres = "" if gres in ("(null)", "N/A") else gres
    used = kv.get("GresUsed", "")
    cpus = kv.get("CPUTot")
    alloc = kv.get("CPUAlloc")
    return NodeRecord(
        name=kv.get("NodeName", ""),
        state=state,
        flags=flags,
        reason=reason,
        reason_user=user,
        reason_time=when,
        gres=gres,
        gres_used=used,
        gpus_total=gres_gpu_count(gres),
        gpus_used=gres_gpu_count(used) if used else _alloc_tres_gpus(kv.get("AllocTRES", "")),
        partitions=[p for p in kv.get("Partitions", "").split(",") if p],
        cpus=int(cpus) if cpus and cpus.isdigit() else None,
        cpus_alloc=int(alloc) if alloc and alloc.isdigit() else None,
        boot_time=_kv_time(kv.get("BootTime")),
        last_busy=_kv_time(kv.get("LastBusyTime")),
    )


def _kv_time(v: str | None) -> str | None:
    """scontrol's '2026-12-01T09:29:14' (controller local time) as printed; None/Unknown/missing -> None."""
    return v if v and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$", v) else None


def _alloc_tres_gpus(tres: str) -> int:
    m = re.search(r"gres/gpu=(\d+)", tres or "")
    return int(m.group(1)) if m else 0


def parse_scontrol_nodes_oneliner(text: str) -> list[NodeRecord]:
    """`scontrol -o [-d] show node` output: one node per line."""
    return [node_from_kv(parse_kv_line(line)) for line in text.splitlines() if line.startswith("NodeName=")]


def parse_scontrol_job_oneliner(text: str) -> JobRecord:
    for line in text.splitlines():
        if line.startswith("JobId="):
            kv = parse_kv_line(line, tail_keys=())
            exit_code = kv.get("ExitCode", "")
            return JobRecord(
                job_id=int(kv["JobId"]),
                name=kv.get("JobName", ""),
                state=kv.get("JobState", ""),
                reason=kv.get("Reason", ""),
                nodes=kv.get("NodeList", ""),
                user=kv.get("UserId", "").split("(")[0],
                exit_code=exit_code,
                restarts=int(kv.get("Restarts", "0") or 0),
                partition=kv.get("Partition", ""),
                raw=kv,
            )
    raise ValueError("no JobId= record in scontrol output")
