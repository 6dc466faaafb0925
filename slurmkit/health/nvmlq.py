"""Pure: what NVML answered (slurmkit/health/nvml.py reads it) -> `nvidia-smi -q` text of the sections the checks
read, in the layout drivers 550-565 print (GPU header, Product Name, Minor Number, GPU Recovery Action, PCI link,
Clocks Event Reasons, FB Memory Usage, ECC Mode and counters, Retired Pages, Remapped Rows, Fabric, Processes).

The checks stay as they are: they parse this text as they parse nvidia-smi's (health/nvsmi.py), so a verdict
cannot depend on where the figures came from, and the health log's evidence reads the same. A call NVML refused
is printed the way nvidia-smi prints it: `N/A` (not supported), `GPU is lost`, `Unknown Error`; a GPU whose
handle NVML could not give is nvidia-smi's "Unable to determine the device handle" line.
"""

from __future__ import annotations

from ..record import Record


class Failed(Record, frozen=True, kw_only=False):
    """An NVML call that answered an error: `text` is what nvidia-smi prints in its place."""

    text: str


# NVML's clocks event reason bits -> the `-q` labels (the clocks check's table names the same bits)
REASON_LABELS = (
    (0x1, "Idle"),
    (0x2, "Applications Clocks Setting"),
    (0x4, "SW Power Cap"),
    (0x8, "HW Slowdown"),
    (0x40, "HW Thermal Slowdown"),
    (0x80, "HW Power Brake Slowdown"),
    (0x10, "Sync Boost"),
    (0x20, "SW Thermal Slowdown"),
    (0x100, "Display Clock Setting"),
)
# NVML_GPU_RECOVERY_ACTION_* -> the `-q` text
RECOVERY = {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
FABRIC_STATE = {0: "N/A", 1: "Not Started", 2: "In Progress", 3: "Completed"}
FABRIC_SUMMARY = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
# the health mask: (label, shift, width, {value: text}); 0 is "not supported" for every field
_TF = {1: "True", 2: "False"}
FABRIC_HEALTH = (
    ("Bandwidth", 0, 0x3, {1: "Degraded", 2: "Full"}),
    ("Route Recovery in progress", 2, 0x3, _TF),
    ("Route Unhealthy", 4, 0x3, _TF),
    ("Access Timeout Recovery", 6, 0x3, _TF),
    (
        "Incorrect Configuration",
        8,
        0xF,
        {
            1: "None",
            2: "Incorrect SysGuid",
            3: "Incorrect Chassis Serial Number",
            4: "No Partition",
            5: "Insufficient NVLinks",
            6: "Incompatible GPU Firmware",
            7: "Invalid Location",
            8: "GPU State Invalid",
        },
    ),
)
W = 42  # nvidia-smi puts every colon at column 42 (at any depth)


def _val(v, fmt=str) -> str:
    if isinstance(v, Failed):
        return v.text
    if v is None:
        return "N/A"
    return fmt(v)


def _mib(v) -> str:
    return _val(v, lambda b: f"{int(b) // (1 << 20)} MiB")


def _yes(v) -> str:
    return _val(v, lambda b: "Yes" if b else "No")


class _Out:
    def __init__(self):
        self.lines: list[str] = []

    def kv(self, depth: int, key: str, value: str) -> None:
        pad = " " * (4 * depth)
        self.lines.append(f"{pad}{key:<{max(W - len(pad), len(key) + 1)}}: {value}")

    def sec(self, depth: int, title: str) -> None:
        self.lines.append(" " * (4 * depth) + title)


def _pcie(o: _Out, g: dict) -> None:
    o.sec(1, "PCI")
    o.kv(2, "Bus Id", _val(g.get("bus_id")))
    o.sec(2, "GPU Link Info")
    o.sec(3, "PCIe Generation")
    p = g.get("pcie") or {}
    o.kv(4, "Max", _val(p.get("gen_max")))
    o.kv(4, "Current", _val(p.get("gen_current")))
    o.kv(4, "Device Max", _val(p.get("gen_device_max")))
    o.sec(3, "Link Width")
    o.kv(4, "Max", _val(p.get("width_max"), lambda w: f"{w}x"))
    o.kv(4, "Current", _val(p.get("width_current"), lambda w: f"{w}x"))


def _reasons(o: _Out, mask) -> None:
    o.sec(1, "Clocks Event Reasons")
    for bit, label in REASON_LABELS:
        o.kv(2, label, _val(mask, lambda m, bit=bit: "Active" if m & bit else "Not Active"))


def _ecc(o: _Out, g: dict) -> None:
    mode = g.get("ecc_mode")
    o.sec(1, "ECC Mode")
    cur, pend = mode if isinstance(mode, tuple) else (mode, mode)
    o.kv(2, "Current", _val(cur, lambda m: "Enabled" if m else "Disabled"))
    o.kv(2, "Pending", _val(pend, lambda m: "Enabled" if m else "Disabled"))
    e = g.get("ecc") or {}
    o.sec(1, "ECC Errors")
    for counter in ("Volatile", "Aggregate"):
        c = e.get(counter.lower()) or {}
        o.sec(2, counter)
        for key in (
            "SRAM Correctable",
            "SRAM Uncorrectable Parity",
            "SRAM Uncorrectable SEC-DED",
            "DRAM Correctable",
            "DRAM Uncorrectable",
        ):
            o.kv(3, key, _val(c.get(key)))
        if counter == "Aggregate":
            o.kv(3, "SRAM Threshold Exceeded", _yes(e.get("sram_threshold_exceeded")))
    rp = g.get("retired") or {}
    o.sec(1, "Retired Pages")
    o.kv(2, "Single Bit ECC", _val(rp.get("single")))
    o.kv(2, "Double Bit ECC", _val(rp.get("double")))
    o.kv(2, "Pending Page Blacklist", _yes(rp.get("pending")))
    rr = g.get("remap")
    if isinstance(rr, Failed):
        o.kv(1, "Remapped Rows", rr.text)  # what nvidia-smi prints for the whole section of a lost GPU
    else:
        corr, unc, pending, failure = rr if rr else (None, None, None, None)
        o.sec(1, "Remapped Rows")
        o.kv(2, "Correctable Error", _val(corr))
        o.kv(2, "Uncorrectable Error", _val(unc))
        o.kv(2, "Pending", _yes(pending))
        o.kv(2, "Remapping Failure Occurred", _yes(failure))


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _fabric(o: _Out, f) -> None:
    o.sec(1, "Fabric")
    if isinstance(f, Failed) or f is None:
        text = f.text if isinstance(f, Failed) else "N/A"
        for key in ("State", "Status", "CliqueId", "ClusterUUID"):
            o.kv(2, key, text)
        return
    state = f["state"]
    on = state not in (0, None)
    o.kv(2, "State", FABRIC_STATE.get(state, f"Unknown ({state})"))
    o.kv(2, "Status", f["status_text"] if on and state == 3 else "N/A")
    o.kv(2, "CliqueId", str(f["clique_id"]) if on else "N/A")
    o.kv(2, "ClusterUUID", _uuid(f["cluster_uuid"]) if on else "N/A")
    o.sec(2, "Health")
    mask, summary = f.get("health_mask"), f.get("health_summary")
    if summary is not None:
        o.kv(3, "Summary", FABRIC_SUMMARY.get(summary, "N/A"))
    for label, shift, width, names in FABRIC_HEALTH:
        o.kv(3, label, "N/A" if mask is None else names.get((mask >> shift) & width, "N/A"))


def _procs(o: _Out, procs) -> None:
    if isinstance(procs, Failed):
        o.kv(1, "Processes", procs.text)
        return
    if not procs:
        o.kv(1, "Processes", "None")
        return
    o.sec(1, "Processes")
    for p in procs:
        o.kv(2, "GPU instance ID", "N/A")
        o.kv(2, "Compute instance ID", "N/A")
        o.kv(2, "Process ID", str(p["pid"]))
        o.kv(3, "Type", p["type"])
        o.kv(3, "Name", _val(p.get("name")))
        o.kv(3, "Used GPU Memory", _mib(p.get("used_bytes")))


def render(node: dict) -> str:
    """{"driver_version", "cuda_version", "gpus": [...]} (nvml.read's answer) -> `nvidia-smi -q` text."""
    o = _Out()
    o.lines += ["", "==============NVSMI LOG==============", ""]
    o.kv(0, "Driver Version", _val(node.get("driver_version")))
    o.kv(0, "CUDA Version", _val(node.get("cuda_version")))
    o.lines.append("")
    count = node.get("count")
    o.kv(0, "Attached GPUs", _val(count))
    # nvidia-smi's own lines where there is nothing to list (health/nvsmi.py's errors() reads them: a finding)
    if count == 0:
        o.lines.append("No devices were found")
    elif isinstance(count, Failed):
        o.lines.append(f"Error: nvmlDeviceGetCount(): {count.text}")
    for g in node.get("gpus", ()):
        if isinstance(g.get("handle"), Failed):
            # nvidia-smi's own line for a GPU NVML cannot open (health/nvsmi.py's errors() reads it)
            o.lines.append(f"Unable to determine the device handle for GPU {g['index']}: {g['handle'].text}")
            continue
        o.sec(0, f"GPU {_val(g.get('bus_id'))}")
        o.kv(1, "Product Name", _val(g.get("name")))
        o.kv(1, "GPU UUID", _val(g.get("uuid")))
        o.kv(1, "Minor Number", _val(g.get("minor")))
        o.kv(1, "GPU Recovery Action", _val(g.get("recovery"), lambda a: RECOVERY.get(a, f"Unknown ({a})")))
        _pcie(o, g)
        _reasons(o, g.get("reasons"))
        mem = g.get("memory")
        o.sec(1, "FB Memory Usage")
        for key in ("total", "used", "free"):
            o.kv(2, key.title(), mem.text if isinstance(mem, Failed) else _mib((mem or {}).get(key)))
        _ecc(o, g)
        _fabric(o, g.get("fabric"))
        _procs(o, g.get("processes"))
        o.lines.append("")
    return "\n".join(o.lines) + "\n"
