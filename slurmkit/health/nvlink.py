"""Pure parsers for NVLink status and error counters.

`nvidia-smi nvlink -s` ("GPU 0: ... / Link 3: <inactive>") and `dcgmi nvlink -s` ("gpuId 0: / U U D X"), and
error counters from `nvidia-smi nvlink -e` ("Link 0: Replay Errors: 0") or `dcgmi nvlink -e` ("-> CRC FLIT Error
| 0"). A GPU without NVLink prints no links: that is "no NVLink", not a fault.
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^\s*(?:GPU (?P<idx>\d{1,4}):|gpuId (?P<gid>\d{1,4}):|\|\s*GPU (?P<tid>\d{1,4})\s)", re.ASCII)
# matched against the stripped line: `(.*?)\s*$` backtracked quadratically over a long run of blanks
_LINK = re.compile(r"Link (?P<n>\d{1,4}):\s*(?P<v>.*)", re.ASCII)
_DCGM_STATES = {"U": "up", "D": "down", "X": "disabled", "_": "not present"}
_ERR_SMI = re.compile(r"Link (?P<n>\d{1,4}):\s*(?P<name>[A-Za-z ]*Errors?)\s*:\s*(?P<v>\d+)", re.ASCII)
_ERR_TBL = re.compile(r"->\s*(?P<name>[A-Za-z ]*Error)\s*\|\s*(?P<v>\d+)", re.ASCII)
_TBL_LINK = re.compile(r"\|\s*Link (?P<n>\d{1,4})\s", re.ASCII)


def _count(v: str) -> int:
    """A counter; one too long to be real (and for int() past 4,300 digits) reads as huge: over any threshold."""
    return int(v) if len(v) <= 18 else 10**18


def parse_status(text: str) -> dict[str, dict[int, str]]:
    """{gpu: {link: "up" | "inactive" | "down" | "disabled" | "<speed text>"}}; speeds mean up."""
    out: dict[str, dict[int, str]] = {}
    gpu = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            gpu = m.group("idx") or m.group("gid") or m.group("tid")
            out.setdefault(gpu, {})
            continue
        if gpu is None:
            continue
        m = _LINK.match(line.strip())
        if m and "Error" not in m.group("v"):
            v = m.group("v")
            out[gpu][int(m.group("n"))] = "inactive" if "inactive" in v.lower() else ("up" if "/s" in v else v)
            continue
        toks = line.split()
        if toks and all(t in _DCGM_STATES for t in toks):
            for i, t in enumerate(toks):
                out[gpu][i] = _DCGM_STATES[t]
    return out


_MODEL = re.compile(r"^\s*GPU \d{1,4}:\s*(?P<model>[^()]{1,80}?)\s*(?:\(UUID|$)", re.ASCII)


def parse_models(text: str) -> dict[str, str]:
    """{gpu: model} from `nvidia-smi nvlink -s`'s `GPU N: NVIDIA H100 PCIe (UUID: ...)` lines (dcgmi prints none)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _GPU.match(line)
        if m and m.group("idx"):
            mm = _MODEL.match(line)
            if mm and mm.group("model"):
                out[m.group("idx")] = mm.group("model")
    return out


def parse_errors(text: str) -> dict[str, dict[str, int]]:
    """{gpu: {"link N <name>": count}} for non-zero and zero counters alike."""
    out: dict[str, dict[str, int]] = {}
    gpu = None
    link = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            gpu = m.group("idx") or m.group("gid") or m.group("tid")
            out.setdefault(gpu, {})
        if gpu is None:
            continue
        m = _ERR_SMI.search(line)
        if m:
            out[gpu][f"link {m.group('n')} {m.group('name').strip()}"] = _count(m.group("v"))
            continue
        m = _TBL_LINK.search(line)
        if m:
            link = m.group("n")
            continue
        m = _ERR_TBL.search(line)
        if m:
            out[gpu][f"link {link} {m.group('name').strip()}"] = _count(m.group("v"))
    return out
