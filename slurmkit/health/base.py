"""What a check returns, and the report the runner builds from them."""

from __future__ import annotations

from ..record import Record, field

STATUSES = ("ok", "warn", "fail", "skip")
_RANK = {"ok": 0, "skip": 0, "warn": 1, "fail": 2}


class Result(Record, kw_only=False):
    """One check's verdict on one node: status, a reason a human can act on, and its evidence."""

    check: str
    status: str  # ok | warn | fail | skip
    reason: str = ""  # one line a human can act on ("GPU 0000:3b:00 fell off the bus")
    evidence: dict = field(default_factory=dict)  # what the check saw (the Xid line, the counters ...)
    seconds: float = 0.0
    code: str = ""  # short tag for the drain reason: "xid79", "ecc", "gpu_count" ...
    # deferred state change (the Xid "seen" mark): the hook calls it only after it acted on the verdict (drained,
    # a drain already in place, or not a fail), so a fault it could not act on is reported again next time
    commit: object = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"check": self.check, "status": self.status, "reason": self.reason, "evidence": self.evidence}


def live_unreadable(ctx, check: str, what: str, why: str | None) -> Result | None:
    """A live tool that exited 0 with output `check` cannot read (`why`, from the parser): a finding, never a skip
    (garbage or nothing from nvidia-smi on a node is a node to look at). None when the output reads, when the input
    is a captured file (its parser says exit 2), or when the tool exited non-zero (the runner reports the exit)."""
    if why is None or not ctx.live or ctx.failed_tool(check):
        return None
    return Result(check, "fail", f"{what} output unreadable: {why}", {"unreadable": why, "tool": what}, code=check)


def worst(statuses) -> str:
    out = "ok"
    for s in statuses:
        if _RANK.get(s, 0) > _RANK[out]:
            out = s
    return out


class Report(Record, kw_only=False):
    """Every verdict of one profile's run on one node."""

    node: str
    profile: str
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    # where the GPU checks read the GPUs, when they read them live: {"source": "nvml"} or {"source":
    # "nvidia-smi", "nvml": why NVML was not read}
    gpu_source: dict | None = None

    @property
    def healthy(self) -> bool:
        return all(r.status != "fail" for r in self.results)

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.status == "fail"]

    def to_dict(self) -> dict:
        out = {"node": self.node, "healthy": self.healthy, "results": [r.to_dict() for r in self.results]}
        if self.gpu_source:
            out["gpu_source"] = self.gpu_source
        return out


_NA = ("n/a", "not supported", "unknown error", "none", "insufficient permissions", "unknown", "")
MAX_DIGITS = 18  # a counter longer than this is not a counter (and int() refuses 4,300 digits)


def is_na(v) -> bool:
    """'N/A', '[N/A]', '[Not Supported]', 'Unknown Error', '' or None: a value nvidia-smi could not read."""
    return v is None or str(v).strip().strip("[]").strip().lower() in _NA


def to_int(v) -> int | None:
    """'177' -> 177; 'N/A', '[N/A]', '[Not Supported]', '', None -> None; '1 MiB' -> 1; '16x' -> 16.
    ASCII digits only ('²' is a digit to str.isdigit but not to int). A number of more than MAX_DIGITS digits
    (no real counter has one; int() refuses 4,300) reads as 10**18: over every threshold, so it fails closed."""
    if v is None:
        return None
    s = str(v).strip()
    if is_na(s):
        return None
    num = ""
    for ch in s:
        if "0" <= ch <= "9":
            num += ch
            if len(num) > MAX_DIGITS:
                return 10**MAX_DIGITS
        elif num:
            break
        elif ch not in "+ ":
            return None
    return int(num) if num else None


def is_yes(v) -> bool:
    return str(v or "").strip().lower() in ("yes", "true", "1", "active", "enabled")


def is_unknown_error(v) -> bool:
    return "unknown error" in str(v or "").lower()
