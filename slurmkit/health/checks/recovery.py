"""recovery: the driver's own verdict on each GPU, `gpu_recovery_action` (R550+), from `nvidia-smi -q` ("GPU
Recovery Action : Reset") or its `--query-gpu=index,gpu_recovery_action` CSV. A GPU the driver says needs a reset
or a reboot is unusable even when every counter looks clean and `dcgmi health` says Healthy (DCGM #263): never
trust one source alone. A driver that does not report the field leaves this check with nothing to read (skip)."""

from __future__ import annotations

import re

from .. import nvsmi
from ..base import Result, live_unreadable
from ..context import NoData

NAME = "recovery"
# what each action means and what to do (NVIDIA's GPU recovery actions)
ACTIONS = {
    "none": None,
    "reset": "needs a GPU reset",
    "reboot": "needs a node reboot",
    "drain p2p": "needs its peer-to-peer traffic drained, then a reset",
    "drain and reset": "needs draining, then a GPU reset",
}
_BUS = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# both matched against the stripped line (an author's `<= note` cut off first): a lazy group followed by `\s*$`
# backtracked quadratically over a long run of blanks (a 20 KB line took 10 s)
_Q = re.compile(r"GPU Recovery Action\s*:\s*(.*)")
_CSV = re.compile(r"(\d{1,4})\s*,\s*([A-Za-z][A-Za-z0-9 /\[\]_-]*)")
_NA = {"[n/a]", "n/a", "[not supported]", "not supported"}


def parse(text: str) -> list[tuple[str, str]]:
    """[(gpu, action)] from either form; gpu is a PCI bus id (-q) or an index (CSV)."""
    out: list[tuple[str, str]] = []
    bus = None
    n = 0
    for line in text.splitlines():
        m = _BUS.match(line)
        if m:
            bus = m.group(1)
            n += 1
            continue
        s = line.strip()
        m = _Q.match(s)
        if m:
            out.append((bus or f"#{n}", m.group(1)))
            continue
        m = _CSV.fullmatch(s.split("<=", 1)[0].rstrip())
        if m and m.group(1).isascii():
            out.append((m.group(1), m.group(2).rstrip()))
    return out


def evaluate(text: str) -> Result:
    found = parse(text)
    if not found:
        raise NoData(
            "no gpu_recovery_action in this input (nvidia-smi -q of driver R550+, or "
            "--query-gpu=index,gpu_recovery_action)"
        )
    ev = {"gpus": {g: a for g, a in found}}
    bad, unknown, na = [], [], 0
    for g, a in found:
        key = " ".join(a.lower().split())
        if key in _NA:
            na += 1
        elif key not in ACTIONS:
            unknown.append((g, a))
        elif ACTIONS[key]:
            bad.append((g, a, ACTIONS[key]))
    if bad:
        g, a, what = bad[0]
        also = f" (also GPU {', '.join(x[0] for x in bad[1:])})" if len(bad) > 1 else ""
        return Result(NAME, "fail", f"GPU {g} {what} (gpu_recovery_action={a}){also}", ev, code="recovery")
    if unknown:
        return Result(NAME, "warn", f"GPU {unknown[0][0]}: unknown gpu_recovery_action {unknown[0][1]!r}", ev)
    if na == len(found):
        return Result(NAME, "skip", "the driver does not report gpu_recovery_action", ev)
    return Result(NAME, "ok", f"{len(found) - na} GPUs: no recovery action pending", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text)
