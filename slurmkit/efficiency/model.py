"""The plain data the efficiency parsers return and the verdicts read. Standard library only (the epilog uses it)."""

from __future__ import annotations

from ..record import Record, field

# the states a GPU (and a job) can be in, worst first: a job's verdict is its worst GPU's
STATES = ("hung", "suspect-hung", "idle", "unknown", "underused", "busy")


class Finding(Record, kw_only=False):
    """One thing the efficiency reader noticed about a job's samples (a gap, a fault, a note)."""

    text: str
    severity: str = "info"  # info | warn | fault
    gpu: int | str | None = None
    line: int | None = None

    def as_dict(self) -> dict:
        return {"severity": self.severity, "gpu": self.gpu, "line": self.line, "text": self.text}


class GpuSeries(Record, kw_only=False):
    """One GPU's samples, in time order. A value is None where the tool printed N/A, ERR!, [Not Supported]."""

    key: int | str  # the GPU index when known, else its UUID, else its row position
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    t: list[float | None] = field(default_factory=list)  # seconds (epoch or relative); None: not captured
    util: list[float | None] = field(default_factory=list)  # utilization.gpu %, dmon sm %, pmon sum of sm %
    mem_used: list[float | None] = field(default_factory=list)  # MiB
    power: list[float | None] = field(default_factory=list)  # W
    sm_active: list[float | None] = field(default_factory=list)  # DCGM 1002, %
    tensor_active: list[float | None] = field(default_factory=list)  # DCGM 1004, %
    dram_active: list[float | None] = field(default_factory=list)  # DCGM 1005, %
    sm_clock: list[float | None] = field(default_factory=list)  # MHz (clocks.sm); None: not read (an older driver)
    reasons: list[int | None] = field(default_factory=list)  # clock event reasons bitmask (nvidia-smi's .active)
    # the profiling lists above are aligned with t when one dcgmi capture gave everything; the sampler's own
    # dcgmi child runs on its own clock, so its values are appended by add_profile() (means only, no time)
    mem_total: float | None = None  # MiB
    power_limit: float | None = None  # W
    processes: list[dict] = field(default_factory=list)  # {"pid", "name", "used_mib"} from compute-apps / pmon
    mig: bool = False

    def add(
        self,
        *,
        t=None,
        util=None,
        mem_used=None,
        power=None,
        sm_active=None,
        tensor_active=None,
        dram_active=None,
        sm_clock=None,
        reasons=None,
    ) -> None:
        self.t.append(t)
        self.util.append(util)
        self.mem_used.append(mem_used)
        self.power.append(power)
        self.sm_active.append(sm_active)
        self.tensor_active.append(tensor_active)
        self.dram_active.append(dram_active)
        self.sm_clock.append(sm_clock)
        self.reasons.append(reasons)

    def add_profile(self, sm_active=None, tensor_active=None, dram_active=None) -> None:
        self.sm_active.append(sm_active)
        self.tensor_active.append(tensor_active)
        self.dram_active.append(dram_active)


class Capture(Record, kw_only=False):
    """What a parser read: the GPUs it saw and what it noticed on the way."""

    format: str
    gpus: dict = field(default_factory=dict)  # key -> GpuSeries, in first-seen order
    findings: list[Finding] = field(default_factory=list)
    interval: float | None = None  # seconds between samples, when known
    snapshot: bool = False  # one sample per GPU: a moment, not a history
    meta: dict = field(default_factory=dict)  # job id, user, ... from jobstats/seff

    def gpu(self, key, **kw) -> GpuSeries:
        g = self.gpus.get(key)
        if g is None:
            g = self.gpus[key] = GpuSeries(key=key, **kw)
        return g

    def note(self, text: str, *, severity: str = "info", gpu=None, line=None) -> None:
        self.findings.append(Finding(text, severity, gpu, line))
