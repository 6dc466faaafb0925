"""ib: a node's InfiniBand ports. Live, `ibstat` (each HCA port's State, Physical state, Rate, Link layer); a capture
may be `ibstat`, or a fabric-wide `iblinkinfo` / `ibnetdiscover` / `ibnetdiscover -p` (read by
slurmkit/fabric/ibnet.py), judged for the node's own HCAs where the capture names it, else for every host port in it.

What a port must be is the site's (`ib.*`): the ports listed in `ib.required` must be there, LinkUp and Active; a
port that is LinkUp but not Active (Initializing, Armed) has a cable and a switch but no subnet manager made it
usable, and fails whether listed or not; an up port under `ib.min_rate` / `ib.min_width` fails; fewer Active
ports than `ib.min_active` fails. A port slower than the common rate of the other host ports (the node's own in
ibstat, the fabric's in a fabric capture: 4xDDR among 4xEDR) warns by default (`below_peers`): a node may mix
400 Gb/s compute and 200 Gb/s storage HCAs. A port that is Down/Polling and not required is an empty port, never
a fault (iblinkinfo lists dozens); HCAs with no port up and none required warn (`no_port_up`). Ports of another
link layer (Ethernet: RoCE) are judged only when required.

A node without InfiniBand must not drain: with no `ib.required` and no `ib.min_active`, no ibstat, an ibstat that
cannot start the IB stack ("can't init UMAD library") or one that lists no HCA is a skip with its reason. Where
the settings say the node has InfiniBand, each of those is a finding, as is an ibstat that hangs (the runner's
timeout). Output that cannot be read is never ok: a capture exits 2 with its line, live output fails.

With `ib.counters` (off by default: one `perfquery -C HCA -P PORT` per Active port, as root), a live run also
reads each port's LinkDownedCounter and SymbolErrorCounter and compares them with the last run's
(`<state_dir>/ib-<node>.json`, as the Xid mark: moved only by a hook that acted on the verdict, never by
`slurmkit check`): a link that went down since (a flap) fails, symbol errors over `ib.symbol_error_max` warn; a
counter lower than before (cleared, or a reboot) is a new baseline. Captures carry one reading: no counters there.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...errors import CommandError, ParseError, UsageError
from ..base import Result
from ..context import NoData

if TYPE_CHECKING:
    from .. import ibstat

NAME = "ib"
CONDITIONS = {
    "missing": "required but not found",
    "down": "required but down",
    "not_active": "LinkUp but not Active (no subnet manager made it usable)",
    "rate_low": "rate under ib.min_rate",
    "width_low": "width under ib.min_width",
    "too_few_active": "fewer Active InfiniBand ports than ib.min_active",
    "link_downed": "link went down since the last run (LinkDownedCounter grew)",
    "below_peers": "slower than the other host ports",
    "no_port_up": "no InfiniBand port up (list the ports that must be up in ib.required)",
    "symbol_errors": "symbol errors since the last run (SymbolErrorCounter grew)",
}
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]{0,63}")  # an HCA name passed to perfquery -C (never an option)
_NO_STACK = re.compile(r"can't init UMAD library|can't list IB device names")
MAX_EVIDENCE_PORTS = 64


def _reference(ports: list[ibstat.Port]) -> float | None:
    """The common rate of up InfiniBand ports (the most frequent; the faster on a tie); None under two ports."""
    from collections import Counter

    rates = Counter(p.rate for p in ports if p.up and p.rate is not None and _is_ib(p))
    if sum(rates.values()) < 2:
        return None
    return max(rates, key=lambda r: (rates[r], r))


def _is_ib(p: ibstat.Port) -> bool:
    return p.link_layer.strip().lower() == "infiniband"


def _state(p: ibstat.Port) -> str:
    return f"{p.state or '?'}/{p.phys or '?'}"


def _required(entries: list[str], ports: list[ibstat.Port]) -> tuple[set[int], list[tuple[str, str, str]]]:
    """(ids of the ports some entry requires, [(port name, condition, detail)] for entries matching no port)."""
    req: set[int] = set()
    out = []
    for entry in entries:
        hca, _, num = entry.partition(":")
        hit = [p for p in ports if p.hca == hca and (not num or p.port == int(num))]
        if not hit:  # an HCA that fell off the bus is in no ibstat (the ports that are: the evidence)
            out.append((entry, "missing", ""))
        req.update(id(p) for p in hit)
    return req, out


def judge(ports: list[ibstat.Port], s, *, ref: float | None = None) -> list[tuple[str, str, str]]:
    """One host's ports -> [(what, condition, detail)]; `ref`: the common rate of the host ports compared (the
    node's own, or the fabric's: `_reference`)."""
    found: list[tuple[str, str, str]] = []
    req, found_missing = _required(s.required, ports)
    found += found_missing
    ib = [p for p in ports if _is_ib(p) or id(p) in req]
    for p in ib:
        if not p.up:
            if id(p) in req:
                found.append((p.name, "down", _state(p)))
            continue
        if not p.active:
            found.append((p.name, "not_active", f"State {p.state}"))
            continue
        if s.min_rate is not None and p.rate is not None and p.rate < s.min_rate and _is_ib(p):
            found.append((p.name, "rate_low", f"{p.rate_text} < {s.min_rate:g} Gb/s"))
        if s.min_width is not None and p.width is not None and p.width < s.min_width:
            found.append((p.name, "width_low", f"{p.width}x < {s.min_width}x"))
        if ref is not None and p.rate is not None and p.rate < ref and _is_ib(p):
            found.append((p.name, "below_peers", f"{p.rate_text}, the others {ref:g} Gb/s"))
    active = sum(1 for p in ports if _is_ib(p) and p.active)
    if s.min_active and active < s.min_active:
        found.append(("node", "too_few_active", f"{active} < {s.min_active}"))
    if ports and not s.expects_ib() and not any(p.up for p in ports if _is_ib(p)) and any(map(_is_ib, ports)):
        found.append(("node", "no_port_up", ", ".join(f"{p.name} {_state(p)}" for p in ports[:8])))
    return found


def _port_ev(p: ibstat.Port) -> dict:
    ev = {"hca": p.hca, "port": p.port, "state": p.state, "phys": p.phys, "rate_gbps": p.rate, "line": p.line}
    if p.host:
        ev["host"] = p.host
    if p.width is not None or p.speed is not None:
        ev.update(width=p.width, speed=p.speed)
    if not _is_ib(p):
        ev["link_layer"] = p.link_layer
    return ev


def _read(text: str, live: bool) -> tuple[str, list[ibstat.Port]]:
    """(format, host ports); ParseError for what cannot be read."""
    from .. import ibstat  # here: a node without ibstat never imports the parser

    if not text.strip() or ibstat.looks_like_ibstat(text):
        return "ibstat", ibstat.ports(ibstat.parse(text))
    if live:  # ibstat printed something else: never read as a fabric capture
        raise ParseError(f"not ibstat output: {text.strip().splitlines()[0][:80]!r}", line=None)
    from ...fabric import ibnet  # only captures: the hooks never import the fabric parser

    cap = ibnet.parse(text)
    return cap.fmt, ibstat.from_fabric(cap)


def evaluate(text: str, s, *, node: str = "", live: bool = False) -> Result:
    """ibstat or a fabric capture -> the verdict on `node`'s ports (on every host port of a fabric capture that does
    not name `node`). Unreadable input: NoData (a capture: exit 2 with the line), or a fail when `live`."""
    try:
        fmt, ports = _read(text, live)
    except UsageError as e:  # errors.ParseError (ibstat) or fabric.ibnet.ParseError
        if live:
            return unreadable(e)
        raise NoData(e.message, line=e.line) from None
    return verdict(fmt, ports, s, node=node, live=live)


def verdict(fmt: str, ports: list[ibstat.Port], s, *, node: str = "", live: bool = False, counters=None) -> Result:
    """The host ports read from `fmt` -> the verdict; `counters`: (findings, evidence) of the counters' growth."""
    if not ports:
        if not live:
            raise NoData(f"no HCA port in this {fmt} capture (expected `ibstat` output, iblinkinfo or ibnetdiscover)")
        if not s.expects_ib():
            return Result(NAME, "skip", "ibstat lists no HCA: no InfiniBand on this node", {"source": fmt})
    mine = [p for p in ports if p.host and node and (p.host == node or p.host.split(".")[0] == node)]
    judged = mine or ports
    scope = "node" if fmt == "ibstat" or mine else "fabric"
    if not s.expects_ib() and not any(map(_is_ib, judged)):
        n = len(judged)
        return Result(NAME, "skip", f"no InfiniBand port ({n} of another link layer, not required)", {"source": fmt})
    found: list[tuple[str, str, str]] = []
    ref = _reference(ports)
    by_host: dict[str, list[ibstat.Port]] = {"": []} if not judged else {}  # no port: the required ones are missing
    for p in judged:
        by_host.setdefault(p.host, []).append(p)
    for host in sorted(by_host):
        found += judge(by_host[host], s, ref=ref)
    if counters is not None:
        found += counters[0]
    texts = {
        c: [f"{w}: {CONDITIONS[c]} ({d})" if d else f"{w}: {CONDITIONS[c]}" for w, cc, d in found if cc == c]
        for c in CONDITIONS
    }
    fails = [t for c in CONDITIONS if c in s.fail_on for t in texts[c]]
    warns = [t for c in CONDITIONS if c in s.warn_on and c not in s.fail_on for t in texts[c]]
    ib_ports = [p for p in judged if _is_ib(p)]
    up = [p for p in ib_ports if p.active]
    ev: dict = {
        "source": fmt,
        "scope": scope,
        "ports_total": len(judged),
        "ports": [_port_ev(p) for p in judged[:MAX_EVIDENCE_PORTS]],
        "active": len(up),
        "reference_gbps": ref,
        "conditions": [{"port": w, "condition": c, "detail": d} for w, c, d in found[:MAX_EVIDENCE_PORTS]],
    }
    if counters is not None:
        ev["counters"] = counters[1]
    if fails or warns:
        ev["findings"] = (fails + warns)[:MAX_EVIDENCE_PORTS]
    if fails:
        return Result(
            NAME, "fail", "; ".join(fails[:4]) + (f" (+{len(fails) - 4} more)" if len(fails) > 4 else ""), ev, code=NAME
        )
    if warns:
        return Result(NAME, "warn", "; ".join(warns[:4]) + (f" (+{len(warns) - 4} more)" if len(warns) > 4 else ""), ev)
    rates = sorted({p.rate_text for p in up})
    empty = len(ib_ports) - len(up)
    why = f"{len(up)} InfiniBand port{'s' if len(up) != 1 else ''} Active/LinkUp at {', '.join(rates) or '?'}"
    if empty:
        why += f"; {empty} down, not required (empty ports)"
    if counters is not None:
        n = len(counters[1].get("ports", {}))
        why += f"; counters of {n} port{'s' if n != 1 else ''} {counters[1].get('status', 'read')}"
    if scope == "fabric":
        hosts = len({p.host for p in judged})
        why += f"; every host port of the {fmt} capture ({hosts} hosts, {node or 'this node'} not among them)"
    return Result(NAME, "ok", why, ev)


def unreadable(e: UsageError, tool: str = "ibstat") -> Result:
    """Live output that cannot be read: a finding, never a skip."""
    why = f"{e.message} (line {e.line})" if e.line else e.message
    return Result(NAME, "fail", f"{tool} output unreadable: {why}", {"unreadable": why, "tool": tool}, code=NAME)


def run(ctx) -> Result:
    s = ctx.settings.ib
    try:
        text = ctx.text(NAME, "ibstat")
    except CommandError as e:
        if e.missing and not s.expects_ib():
            return Result(
                NAME,
                "skip",
                "no ibstat on this node, and no ib.required or ib.min_active: no InfiniBand expected",
                {"argv": e.argv},
            )
        if e.missing:
            st = "fail" if ctx.settings.health.fail_closed else "warn"
            why = f"{e.argv[0] if e.argv else 'ibstat'} not found, and ib.required / ib.min_active say this node has "
            why += "InfiniBand (install infiniband-diags, or point tools.ibstat at it)"
            return Result(NAME, st, why, {"argv": e.argv}, code=NAME if st == "fail" else "")
        raise  # the runner: a finding (hung)
    if ctx.live:
        bad = ctx.failed_tool(NAME)
        if bad is not None:
            err = bad[2]
            if not s.expects_ib() and _NO_STACK.search(err):
                ctx.accept_exit("ibstat")
                last = err.strip().splitlines()[-1][:200]
                return Result(NAME, "skip", f"no InfiniBand stack on this node (ibstat: {last})", {"stderr": last})
            return Result(NAME, "skip", "ibstat exited non-zero", {})  # the runner makes it a finding
    if not (ctx.live and s.counters):
        return evaluate(text, s, node=ctx.node, live=ctx.live)
    try:
        fmt, ports = _read(text, True)
    except UsageError as e:
        return unreadable(e)
    try:
        counters, nxt, path = _read_counters(ctx, s, ports)
    except UsageError as e:
        return unreadable(e, "perfquery")
    if ctx.failed_tool(NAME):
        return Result(NAME, "skip", "perfquery exited non-zero", {})  # the runner makes it a finding
    res = verdict(fmt, ports, s, node=ctx.node, live=True, counters=counters)
    # the new readings become the baseline only once a hook acted on this verdict (as the Xid mark), so a flap whose
    # drain failed is reported again; `slurmkit check` never moves it
    res.commit = lambda: _save(path, nxt)
    return res


def growth(prev: dict, now: dict, s) -> tuple[list[tuple[str, str, str]], list[str]]:
    """{port: {counter: value}} of the last run and of this one -> ([(port, condition, detail)], [ports whose
    counters went back: cleared or a reboot, a new baseline]). A port first seen has no growth."""
    found: list[tuple[str, str, str]] = []
    reset: list[str] = []
    for port, cur in now.items():
        old = prev.get(port)
        if not isinstance(old, dict):
            continue
        if any(not isinstance(old.get(k), int) or cur[k] < old[k] for k in cur):
            reset.append(port)
            continue
        downed = cur["link_downed"] - old["link_downed"]
        if downed > s.link_downed_max:
            found.append((port, "link_downed", f"+{downed}, now {cur['link_downed']}"))
        sym = cur["symbol_error"] - old["symbol_error"]
        if sym > s.symbol_error_max:
            found.append((port, "symbol_errors", f"+{sym}, now {cur['symbol_error']}"))
    return found, reset


def _read_counters(ctx, s, ports: list[ibstat.Port]) -> tuple[tuple[list, dict], dict, str]:
    """Run perfquery on each Active InfiniBand port (the edge), judge the growth against the state file."""
    import json

    from .. import ibstat

    path = ctx.state_path("ib")
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    prev: dict = {}
    if isinstance(state, dict) and isinstance(state.get("ports"), dict):
        prev = state["ports"]
    now: dict[str, dict[str, int]] = {}
    for p in ports:
        if not (_is_ib(p) and p.active and _SAFE_NAME.fullmatch(p.hca)):
            continue
        src = f"perfquery:{p.hca}:{p.port}"
        text = ctx.text(NAME, src)  # a missing or hung perfquery raises: the runner's finding
        if src in ctx.exits:
            continue
        now[f"{p.hca}:{p.port}"] = ibstat.parse_perfquery(text, f"perfquery -C {p.hca} -P {p.port}")
    found, reset = growth(prev, now, s)
    sat = [f"{port} {k}" for port, cur in now.items() for k, v in cur.items() if ibstat.saturated(k, v)]
    ev: dict = {
        "ports": now,
        "state_file": path,
        "status": "steady since the last run" if prev else "read (first baseline)",
    }
    if reset:
        ev["reset"] = reset
    if sat:
        ev["saturated"] = sat  # a counter at its maximum cannot grow: `perfquery -R` clears it
    return (found, ev), {"ports": {**prev, **now}}, path


def _save(path: str, state: dict) -> None:
    import json
    import os

    from ...files import atomic_write

    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, json.dumps(state, sort_keys=True))
