"""The edge where the GPU checks read NVML in process (`health.gpu_source`): nvidia-ml-py over the driver's
libnvidia-ml, instead of one `nvidia-smi -q` process per run. What it reads goes through health/nvmlq.py into the
`-q` text the checks already parse, so every check gives the same verdict either way.

Bounded: every read runs in one worker thread the caller waits on for at most `timeout` seconds. A call that does
not answer (a driver stuck on a GPU that fell off the bus) is a finding, `Hung`, naming the call and the GPU;
the caller reads nvidia-smi instead (health/context.py). The stuck thread cannot be killed, so while it is stuck
this process does not call NVML again (every later read says it is still hung); the hook agent keeps NVML
initialised between runs, and a one-shot hook exits past it.

Light: nothing here imports nvidia-ml-py until `unavailable()` found libnvidia-ml.so.1 where the dynamic loader
would (LD_LIBRARY_PATH, /etc/ld.so.cache, the default directories), so a node without NVIDIA's driver pays a few
stat calls, not the binding's import.
"""

from __future__ import annotations

import os
import threading
import time

from .nvmlq import Failed

LIB = "libnvidia-ml.so.1"
_DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
_LD_CACHE = "/etc/ld.so.cache"


class Hung(Exception):
    """An NVML call that did not answer within the deadline."""

    def __init__(self, call: str, seconds: float, still: bool = False):
        self.call, self.seconds, self.still = call, seconds, still
        what = (
            f"has not answered for {seconds:.0f}s (a call before this run)"
            if still
            else f"did not answer in {seconds:g}s"
        )
        super().__init__(f"NVML {call} {what}")


class Unavailable(Exception):
    """NVML cannot be used here: why (no binding, no library, no driver)."""


_lock = threading.Lock()
_state: dict = {"init": False, "busy": None}  # busy: (call, since, done event) of the worker inside NVML


def _library_found(environ=os.environ) -> bool:
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(_DEFAULT_DIRS)
    if any(os.path.exists(os.path.join(d, LIB)) for d in dirs):
        return True
    try:
        with open(_LD_CACHE, "rb") as f:
            return LIB.encode() in f.read(16 << 20)
    except OSError:
        return False


def unavailable() -> str | None:
    """Why NVML cannot be read in this process (None: the library is where the loader finds it)."""
    if not _library_found():
        return f"{LIB} not found (no NVIDIA driver: LD_LIBRARY_PATH, {_LD_CACHE})"
    try:
        import importlib.util

        if importlib.util.find_spec("pynvml") is None:
            return "nvidia-ml-py is not installed (pip install 'slurmkit[nvml]')"
    except (ImportError, ValueError):
        return "nvidia-ml-py is not installed (pip install 'slurmkit[nvml]')"
    return None


def bounded(fn, timeout: float, where=lambda: "call"):
    """fn() in a worker thread, waited on for `timeout` seconds: its answer, its exception, or Hung(where()).
    One worker at a time: a read already running is waited for within the same deadline; one still stuck is
    Hung(still=True) at once."""
    deadline = time.monotonic() + timeout
    while True:
        with _lock:
            busy = _state["busy"]
            if busy is None:
                done = threading.Event()
                _state["busy"] = ("nvmlInit", time.monotonic(), done)
                break
        call, since, other = busy
        if since + timeout < time.monotonic() or not other.wait(max(0.0, deadline - time.monotonic())):
            raise Hung(call, time.monotonic() - since, still=True)
    box: dict = {}

    def work():
        try:
            box["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["e"] = e
        finally:
            with _lock:
                _state["busy"] = None
            done.set()

    threading.Thread(target=work, name="slurmkit-nvml", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise Hung(where(), timeout)
    if "e" in box:
        raise box["e"]
    return box["v"]


def read(timeout: float) -> dict:
    """Every field the GPU checks read, for every GPU, in one bounded worker (nvmlInit the first time only).
    Raises Unavailable (NVML does not initialise: no driver) or Hung."""
    here = {"call": "nvmlInit"}

    def where():
        return here["call"]

    return bounded(lambda: _read_all(here), timeout, where)


def _err_text(N, e) -> str:
    """What nvidia-smi prints for an NVML error in a `-q` field."""
    v = getattr(e, "value", None)
    if v in (N.NVML_ERROR_NOT_SUPPORTED, N.NVML_ERROR_FUNCTION_NOT_FOUND):  # the driver lacks the call
        return "N/A"
    if v == N.NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions"
    if v == N.NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost"
    if v == N.NVML_ERROR_UNKNOWN:
        return "Unknown Error"
    return str(e)


def _read_all(here: dict) -> dict:
    import pynvml as N  # nvidia-ml-py, found by unavailable()

    if not _state["init"]:
        try:
            N.nvmlInit()
        except N.NVMLError as e:
            raise Unavailable(f"nvmlInit: {e}") from None
        _state["init"] = True  # kept: the hook agent reads again without a new nvmlInit

    def q(name, *args, gpu=None):
        here["call"] = f"{name}" + (f" (GPU {gpu})" if gpu is not None else "")
        with _lock:
            _state["busy"] = (here["call"], time.monotonic(), _state["busy"][2])
        fn = getattr(N, name, None)
        if fn is None:  # an older nvidia-ml-py without this call: what nvidia-smi prints for a field it lacks
            return Failed("N/A")
        try:
            return fn(*args)
        except N.NVMLError as e:
            return Failed(_err_text(N, e))

    def s(v):
        return v.decode(errors="replace") if isinstance(v, bytes) else v

    cuda = q("nvmlSystemGetCudaDriverVersion")
    count = q("nvmlDeviceGetCount")
    node = {
        "driver_version": s(q("nvmlSystemGetDriverVersion")),
        "cuda_version": cuda if isinstance(cuda, Failed) else f"{cuda // 1000}.{cuda % 1000 // 10}",
        "count": count,
        "gpus": [],
    }
    for i in range(count if isinstance(count, int) else 0):
        h = q("nvmlDeviceGetHandleByIndex", i, gpu=i)
        if isinstance(h, Failed):
            node["gpus"].append({"index": i, "handle": h})
            continue
        node["gpus"].append(_read_gpu(N, q, s, i, h))
    return node


def _read_gpu(N, q, s, i: int, h) -> dict:
    pci = q("nvmlDeviceGetPciInfo", h, gpu=i)
    reasons = getattr(N, "nvmlDeviceGetCurrentClocksEventReasons", None) and "nvmlDeviceGetCurrentClocksEventReasons"
    mem = q("nvmlDeviceGetMemoryInfo", h, gpu=i)
    g: dict = {
        "index": i,
        "bus_id": pci if isinstance(pci, Failed) else s(pci.busId),
        "name": s(q("nvmlDeviceGetName", h, gpu=i)),
        "uuid": s(q("nvmlDeviceGetUUID", h, gpu=i)),
        "minor": q("nvmlDeviceGetMinorNumber", h, gpu=i),
        "pcie": {
            "gen_max": q("nvmlDeviceGetMaxPcieLinkGeneration", h, gpu=i),
            "gen_current": q("nvmlDeviceGetCurrPcieLinkGeneration", h, gpu=i),
            "gen_device_max": q("nvmlDeviceGetGpuMaxPcieLinkGeneration", h, gpu=i),
            "width_max": q("nvmlDeviceGetMaxPcieLinkWidth", h, gpu=i),
            "width_current": q("nvmlDeviceGetCurrPcieLinkWidth", h, gpu=i),
        },
        "reasons": q(reasons or "nvmlDeviceGetCurrentClocksThrottleReasons", h, gpu=i),
        "memory": mem if isinstance(mem, Failed) else {"total": mem.total, "used": mem.used, "free": mem.free},
        "ecc_mode": _pair(q("nvmlDeviceGetEccMode", h, gpu=i)),
        "ecc": _ecc(N, q, h, i),
        "retired": {
            "single": _count(
                q("nvmlDeviceGetRetiredPages", h, N.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, gpu=i)
            ),
            "double": _count(
                q("nvmlDeviceGetRetiredPages", h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, gpu=i)
            ),
            "pending": q("nvmlDeviceGetRetiredPagesPendingStatus", h, gpu=i),
        },
        "remap": q("nvmlDeviceGetRemappedRows", h, gpu=i),
        "recovery": _recovery(N, q, h, i),
        "fabric": _fabric(N, q, h, i),
        "processes": _procs(N, q, s, h, i),
    }
    return g


def _pair(v):
    return v if isinstance(v, Failed) else (v[0], v[1])


def _count(v):
    return v if isinstance(v, Failed) else len(v)


def _ecc(N, q, h, i: int) -> dict:
    """The counters `-q` prints: SRAM from the SRAM status struct (correctable, parity and SEC-DED uncorrectable),
    DRAM from the device-memory location counters."""
    import ctypes

    out: dict = {"volatile": {}, "aggregate": {}}
    st = N.c_nvmlEccSramErrorStatus_v1_t() if hasattr(N, "c_nvmlEccSramErrorStatus_v1_t") else None
    got = q("nvmlDeviceGetSramEccErrorStatus", h, ctypes.byref(st), gpu=i) if st is not None else Failed("N/A")
    for counter, ctype in (("volatile", N.NVML_VOLATILE_ECC), ("aggregate", N.NVML_AGGREGATE_ECC)):
        c = out[counter]
        if isinstance(got, Failed):
            c["SRAM Correctable"] = c["SRAM Uncorrectable Parity"] = c["SRAM Uncorrectable SEC-DED"] = got
        else:
            c["SRAM Correctable"] = getattr(st, f"{counter}Cor")
            c["SRAM Uncorrectable Parity"] = getattr(st, f"{counter}UncParity")
            c["SRAM Uncorrectable SEC-DED"] = getattr(st, f"{counter}UncSecDed")
        for label, etype in (
            ("DRAM Correctable", N.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("DRAM Uncorrectable", N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            c[label] = q("nvmlDeviceGetMemoryErrorCounter", h, etype, ctype, N.NVML_MEMORY_LOCATION_DRAM, gpu=i)
    out["sram_threshold_exceeded"] = got if isinstance(got, Failed) else bool(st.bThresholdExceeded)  # type: ignore[union-attr]
    return out


def _recovery(N, q, h, i: int):
    fid = getattr(N, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if fid is None:
        return Failed("N/A")
    vals = q("nvmlDeviceGetFieldValues", h, [fid], gpu=i)
    if isinstance(vals, Failed):
        return vals
    v = vals[0]
    if v.nvmlReturn != N.NVML_SUCCESS:
        return Failed("N/A" if v.nvmlReturn == N.NVML_ERROR_NOT_SUPPORTED else N.nvmlErrorString(v.nvmlReturn))
    return v.value.uiVal


def _fabric(N, q, h, i: int):
    """GetGpuFabricInfoV takes a pointer to a versioned struct (v3: health summary; v2 before)."""
    import ctypes

    for cls in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
        if not hasattr(N, cls):
            continue
        info = getattr(N, cls)()
        got = q("nvmlDeviceGetGpuFabricInfoV", h, ctypes.byref(info), gpu=i)
        if isinstance(got, Failed) and got.text != "N/A" and "Version" not in got.text:
            return got
        if not isinstance(got, Failed):
            return {
                "state": info.state,
                "status_text": "Success" if info.status == N.NVML_SUCCESS else N.nvmlErrorString(info.status),
                "clique_id": info.cliqueId,
                "cluster_uuid": bytes(info.clusterUuid),
                "health_mask": info.healthMask,
                "health_summary": getattr(info, "healthSummary", None),
            }
    return Failed("N/A")


def _procs(N, q, s, h, i: int):
    out = []
    for kind, name in (("C", "nvmlDeviceGetComputeRunningProcesses"), ("G", "nvmlDeviceGetGraphicsRunningProcesses")):
        got = q(name, h, gpu=i)
        if isinstance(got, Failed):
            if got.text == "N/A":
                continue
            return got
        for p in got:
            pname = q("nvmlSystemGetProcessName", p.pid, gpu=i)
            out.append({"pid": p.pid, "type": kind, "name": s(pname), "used_bytes": p.usedGpuMemory})
    return out
