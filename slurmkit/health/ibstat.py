"""InfiniBand ports as the `ib` check reads them (pure, standard library only).

`ibstat` (rdma-core's infiniband-diags) prints one record per HCA and one block per port:

    CA 'mlx5_0'
            CA type: MT4123
            Number of ports: 1
            ...
            Port 1:
                    State: Active
                    Physical state: LinkUp
                    Rate: 200
                    ...
                    Link layer: InfiniBand

`ibstat CA PORT` prints `CA: 'mlx5_0'` and one port block, unindented. Rate is the port's width times its lane
speed in Gb/s as the driver names it (4x EDR: 100, 2x NDR: 200, 4x NDR: 400, 4x DDR: 20; `2.5` for 1x SDR,
`40 (FDR10)`), so a link trained narrower or slower reads as a lower rate; ibstat prints no width. State is
Down/Initializing/Armed/Active (or `???`), Physical state Sleep/Polling/Disabled/PortConfigurationTraining/LinkUp/
LinkErrorRecovery/PhyTest/No state change (or `???`). Indentation is not relied on (captures pasted into notes are
re-indented with spaces): a `Port N:` line opens a port of the current HCA, and the fields after it are that port's.

Fail closed: a line that is not one of these shapes, a port without State, Physical state or Rate, or an HCA with
fewer port blocks than its `Number of ports` (a capture cut short) raises ParseError with the line. Bounds:
`MAX_LINE` characters a line, `MAX_CAS` HCAs, `MAX_PORTS` ports per HCA. Fabric-wide captures (iblinkinfo,
ibnetdiscover) are read by slurmkit/fabric/ibnet.py; `from_fabric` turns their host ports into the same `Port`s.
"""

from __future__ import annotations

import re
from ..record import Record, field

from ..errors import ParseError

MAX_LINE = 4096
MAX_CAS = 1024
MAX_PORTS = 1024
# Gb/s per lane by IB speed name, as the driver counts a port's rate (4x EDR = 100, 4x FDR = 56)
LANE_GBPS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
_HCA_NAME = re.compile(r"HCA-\d{1,3}|mlx\d{1,2}_\d{1,4}|\S{1,40}_\d{1,4}")


class Port(Record, kw_only=False):
    """One HCA port: its logical and physical state, rate in Gb/s (None: unknown), width and lane speed where the
    source prints them (iblinkinfo, ibnetdiscover), and the line it came from."""

    hca: str  # "mlx5_0"; in a fabric capture the node description's HCA part ("HCA-1", "mlx5_2")
    port: int
    state: str  # "Active", "Down", ...; "" where the source does not say (ibnetdiscover lists links only)
    phys: str  # "LinkUp", "Polling", ...; "" where the source does not say
    rate: float | None
    line: int
    link_layer: str = "InfiniBand"
    width: int | None = None
    speed: str | None = None
    host: str = ""  # the node's name, from a fabric capture's node description
    fdr10: bool = False

    @property
    def up(self) -> bool:
        """Physically up: ibstat's LinkUp, or a link a fabric capture lists (it names the peer)."""
        return self.phys.lower() == "linkup" or (self.phys == "" and self.state == "")

    @property
    def active(self) -> bool:
        return self.up and self.state.lower() in ("active", "")

    @property
    def name(self) -> str:
        return f"{self.host + ' ' if self.host else ''}{self.hca}:{self.port}"

    @property
    def rate_text(self) -> str:
        r = "?" if self.rate is None else f"{self.rate:g}"
        if self.width and self.speed:
            return f"{r} Gb/s ({self.width}x{self.speed})"
        return f"{r} Gb/s{' (FDR10)' if self.fdr10 else ''}"


class Ca(Record, kw_only=False):
    name: str
    kind: str  # "CA", "Switch", "Router", "iWARP RNIC", "???"
    line: int
    nports: int | None = None
    ca_type: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    ports: list[Port] = field(default_factory=list)


_CA = re.compile(r"(CA|Switch|Router|iWARP RNIC|\?\?\?)(:?) '([^'\s]{1,64})'")
_PORT = re.compile(r"Port (\d{1,4}):")
_KV = re.compile(r"([A-Za-z][A-Za-z ]{0,40}?):[ \t]*(.{0,200})")
_RATE = re.compile(r"(\d{1,6}(?:\.\d{1,3})?)(\s*\(FDR10\))?")
_CA_KEYS = ("type", "number of ports", "firmware version", "hardware version", "node guid", "system image guid")


def looks_like_ibstat(text: str) -> bool:
    """The first non-blank line is an ibstat CA header (`CA 'mlx5_0'` or `CA: 'mlx5_0'`)."""
    for line in text.splitlines():
        if line.strip():
            return _CA.fullmatch(line.strip()) is not None
    return False


def parse(text: str, path: str = "<ibstat>") -> list[Ca]:
    """ibstat text -> its HCAs and their ports; [] for no output at all (ibstat on a node with no HCA prints
    nothing). ParseError for anything else it cannot read, with the line."""
    cas: list[Ca] = []
    cur: Ca | None = None
    port: Port | None = None
    seen: set[str] = set()  # the fields the current port has

    def close_port() -> None:
        if port is not None:
            missing = [f for f in ("State", "Physical state", "Rate") if f.lower() not in seen]
            if missing:
                raise ParseError(
                    f"{cur.name if cur else '?'} port {port.port} has no {', '.join(missing)}: the capture is cut short",
                    path=path,
                    line=port.line,
                )

    def close_ca() -> None:
        close_port()
        if cur is not None and cur.nports is not None and len(cur.ports) < cur.nports and cur.kind != "CA:":
            raise ParseError(
                f"{cur.name} says Number of ports: {cur.nports} but {len(cur.ports)} port blocks follow: "
                f"the capture is cut short",
                path=path,
                line=cur.line,
            )

    for n, raw in enumerate(text.splitlines(), 1):
        if len(raw) > MAX_LINE:
            raise ParseError(f"line of {len(raw)} characters, over the limit of {MAX_LINE}", path=path, line=n)
        if "\x00" in raw:
            raise ParseError("NUL byte: not ibstat output", path=path, line=n)
        s = raw.strip()
        if not s:
            continue
        m = _CA.fullmatch(s)
        if m:
            close_ca()
            if len(cas) >= MAX_CAS:
                raise ParseError(f"more than {MAX_CAS} HCAs: not ibstat output", path=path, line=n)
            # `CA: 'x'` is `ibstat CA PORT`'s header: one port follows, whatever Number of ports says
            cur = Ca(m.group(3), m.group(1) + m.group(2), n)
            cas.append(cur)
            port, seen = None, set()
            continue
        if cur is None:
            raise ParseError(
                f"not ibstat output: {s[:80]!r} (expected an HCA header such as CA 'mlx5_0')", path=path, line=n
            )
        m = _PORT.fullmatch(s)
        if m:
            close_port()
            if len(cur.ports) >= MAX_PORTS:
                raise ParseError(f"more than {MAX_PORTS} ports on {cur.name}", path=path, line=n)
            port, seen = Port(cur.name, int(m.group(1)), "", "", None, n), set()
            cur.ports.append(port)
            continue
        m = _KV.fullmatch(s)
        if not m:
            raise ParseError(
                f"not an ibstat line: {s[:80]!r} (expected `Field: value` or `Port N:`)", path=path, line=n
            )
        key, value = m.group(1).strip().lower(), m.group(2).strip()
        if port is None:
            if key.endswith(" type") or key in _CA_KEYS:
                if key == "number of ports":
                    if not value.isdigit() or len(value) > 4:
                        raise ParseError(f"Number of ports {value[:20]!r} is not a count", path=path, line=n)
                    cur.nports = int(value)
                elif key.endswith(" type"):
                    cur.ca_type = value
                cur.fields[key] = value
                continue
            raise ParseError(f"{m.group(1)!r} before any Port N: line of {cur.name}", path=path, line=n)
        seen.add(key)
        if key == "state":
            port.state = value
        elif key == "physical state":
            port.phys = value
        elif key == "rate":
            r = _RATE.fullmatch(value)
            if r is None:
                raise ParseError(f"Rate {value[:40]!r} is not a number of Gb/s", path=path, line=n)
            port.rate, port.fdr10 = float(r.group(1)), bool(r.group(2))
        elif key == "link layer":
            port.link_layer = value
        # Base lid, LMC, SM lid, Capability mask, Port GUID, and fields a newer ibstat may add: not judged
    close_ca()
    return cas


def ports(cas: list[Ca]) -> list[Port]:
    """The ports of the channel adapters (a switch's own ibstat is not a node's)."""
    return [p for c in cas if c.kind.rstrip(":") in ("CA", "???") for p in c.ports]


def split_desc(desc: str) -> tuple[str, str]:
    """A node description -> (host, HCA): "n02 HCA-1" -> ("n02", "HCA-1"), "mgt mlx5_0" -> ("mgt", "mlx5_0");
    one that does not end in an HCA name is all host ("MT25408 ConnectX Mellanox Technologies", "")."""
    head, _, tail = desc.strip().rpartition(" ")
    if head and _HCA_NAME.fullmatch(tail):
        return head.strip(), tail
    return desc.strip(), ""


def from_fabric(cap) -> list[Port]:
    """A fabric capture (slurmkit.fabric.ibnet.Capture) -> every host port it shows, once: as the host reports
    it where the capture has the host's own line, else from its peer's line (a link's width and speed are the
    same from both ends). An empty host port (iblinkinfo `Down/ Polling`, ibnetdiscover -p `4x ???`) is Down."""
    by: dict[tuple[str, int], Port] = {}
    for s in cap.sightings:
        for key, port, own in ((s.node, s.port, True), (s.peer, s.peer_port, False)):
            node = cap.nodes.get(key) if key is not None else None
            if node is None or node.kind != "ca" or port is None:
                continue
            if not own and (key, port) in by:
                continue
            host, hca = split_desc(node.desc)
            rate = s.width * LANE_GBPS[s.speed] if s.width and s.speed else None
            logical = getattr(s, "port_state", "") if own else ""
            phys = getattr(s, "phys_state", "") if own else ""
            if own and s.state == "down" and not phys:
                logical, phys = "Down", "Polling"
            p = Port(hca or node.key, port, logical, phys, rate, s.line, width=s.width, speed=s.speed, host=host)
            if own or (key, port) not in by:
                by[(key, port)] = p
    return list(by.values())


# ---- perfquery: a port's error counters ----
# the counters the ib check follows, by perfquery's names, and their widths in bits (a counter stops at its maximum)
COUNTERS = {"LinkDownedCounter": ("link_downed", 8), "SymbolErrorCounter": ("symbol_error", 16)}
_PQ_LINE = re.compile(r"([A-Za-z][A-Za-z0-9]{0,60}):\.*\s*(\S{0,40})")
_PQ_HEAD = re.compile(r"# Port counters: .{0,200}")


def parse_perfquery(text: str, path: str = "<perfquery>") -> dict[str, int]:
    """`perfquery -C CA -P PORT` text -> {"link_downed": n, "symbol_error": n}. ParseError with the line for a line
    that is not `Name:.....value` or a counter that is not a number; ParseError when either counter is absent."""
    out: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        if len(raw) > MAX_LINE or "\x00" in raw:
            raise ParseError("overlong line or NUL byte: not perfquery output", path=path, line=n)
        s = raw.strip()
        if not s or _PQ_HEAD.fullmatch(s):
            continue
        m = _PQ_LINE.fullmatch(s)
        if m is None:
            raise ParseError(f"not a perfquery line: {s[:80]!r} (expected Name:....value)", path=path, line=n)
        known = COUNTERS.get(m.group(1))
        if known is None:
            continue
        v = m.group(2)
        if not v.isascii() or not v.isdigit() or int(v) >= 1 << known[1]:
            raise ParseError(f"{m.group(1)} {v[:40]!r} is not a {known[1]}-bit count", path=path, line=n)
        out[known[0]] = int(v)
    missing = [k for k, (key, _) in COUNTERS.items() if key not in out]
    if missing:
        raise ParseError(f"no {', '.join(missing)} in this output (expected perfquery's port counters)", path=path)
    return out


def saturated(counter: str, value: int) -> bool:
    bits = next(b for key, b in COUNTERS.values() if key == counter)
    return value >= (1 << bits) - 1
