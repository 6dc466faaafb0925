"""InfiniBand fabric captures -> nodes and the links each node reports (pure, standard library only).

Three formats, told apart by their first meaningful line:
- `ibnetdiscover` (the topology file): records of `vendid=`/`devid=`/`...guid=` lines, a `Switch`/`Ca`/`Rt` line
  and one `[port]` line per cable. Blank lines between records are optional; GUIDs in parentheses drop their
  leading zeros (`(2c903000d81f9)`); a paste may redact GUIDs (`"H-b83f<redacted>"`): such a node is known by
  its GUID text and its node description together.
- `ibnetdiscover -p` (`--ports`): one line per port, `CA 134 1 0xGUID 4x EDR - SW 1719 10 0xGUID ( 'a' - 'b' )`;
  a port with no peer prints `4x ???` and one quoted name: an empty port, not a link.
- `iblinkinfo` (also `-l` line mode, and filtered by `grep Up`, which drops the `CA:`/`Switch:` headers): nodes
  are known by LID there. `Down/ Polling` ports with no peer are empty ports, not faults.

A line starting with `...` is a paste's elision mark (`...omitted`): kept as `elided`, so the caller knows the
capture is not the whole fabric. Anything else that is not one of these shapes raises ParseError with the file
and line; so does a capture cut inside a record. Bounds: `MAX_BYTES` of text, `MAX_LINE` characters a line,
`MAX_NODES` nodes.
"""

from __future__ import annotations

import re
from ..record import Record, field

from ..errors import UsageError

MAX_BYTES = 64 * 1024 * 1024
MAX_LINE = 4096
MAX_NODES = 200_000

# per-lane signalling rate (Gbps) by IB speed name, slowest first: the order a "trained below" finding uses
SPEEDS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.3125,
    "FDR": 14.0625,
    "EDR": 25.78125,
    "HDR": 53.125,
    "NDR": 106.25,
    "XDR": 212.5,
}
_BY_GBPS = {v: k for k, v in SPEEDS.items() if k != "FDR10"}


class ParseError(UsageError):
    """A capture slurmkit cannot read: `.path` and `.line` say where (exit 2)."""


class Node(Record, kw_only=False):
    key: str  # unique in the capture: "S-<guid>", "H-<guid>", "L<lid>" (iblinkinfo), "H-b83f<redacted>#desc"
    kind: str  # "switch", "ca" or "router"
    desc: str = ""
    guid: str | None = None  # 16 hex digits, or the text as printed when it is redacted
    lid: int | None = None
    line: int = 0


class Sighting(Record, frozen=True, kw_only=False):
    """One port as its own node reports it: the peer and the trained width/speed (None when unknown)."""

    node: str
    port: int
    peer: str | None
    peer_port: int | None
    width: int | None
    speed: str | None
    line: int
    state: str = "up"  # "up" or "down" (iblinkinfo's Down/Polling: an empty port)
    hint: str = ""  # iblinkinfo's own "Could be 4X 25.78125 Gbps"
    port_state: str = ""  # iblinkinfo's logical state (Active, Initialize, Armed, Down); "" where not printed
    phys_state: str = ""  # iblinkinfo's physical state (LinkUp, Polling, Disabled ...); "" where not printed


class Capture(Record, kw_only=False):
    path: str
    fmt: str  # "ibnetdiscover", "ibnetdiscover-ports", "iblinkinfo"
    nodes: dict[str, Node] = field(default_factory=dict)
    sightings: list[Sighting] = field(default_factory=list)
    elided: list[int] = field(default_factory=list)  # lines of `...omitted` marks


def norm_guid(text: str) -> str:
    """'0x0002c903000d81f9', '2c903000d81f9' -> '0002c903000d81f9'; a redacted GUID stays as printed."""
    t = text.strip().lower()
    if t.startswith("0x"):
        t = t[2:]
    if re.fullmatch(r"[0-9a-f]{1,16}", t):
        return t.rjust(16, "0")
    return text.strip()


def _redacted(guid: str) -> bool:
    return not re.fullmatch(r"[0-9a-f]{16}", guid)


def _key(prefix: str, guid: str, desc: str) -> str:
    g = norm_guid(guid)
    return f"{prefix}-{g}#{desc}" if _redacted(g) else f"{prefix}-{g}"


def _rate(token: str) -> tuple[int | None, str | None]:
    """'4xEDR' / '4x' + 'EDR' -> (4, 'EDR'); '???', 'undefined' -> None."""
    m = re.fullmatch(r"(\d{1,2})[xX](.*)", token.strip())
    if not m:
        return None, None
    speed = m.group(2).strip().upper()
    return int(m.group(1)), speed if speed in SPEEDS else None


def _iblink_speed(text: str) -> str | None:
    """'25.78125 Gbps' -> 'EDR', '10.0 Gbps (FDR10)' -> 'FDR10'."""
    if "FDR10" in text:
        return "FDR10"
    m = re.match(r"([0-9.]{1,12})\s*Gbps", text.strip())
    if not m:
        return None
    try:
        return _BY_GBPS.get(float(m.group(1)))
    except ValueError:
        return None


class _Builder:
    def __init__(self, path: str, fmt: str):
        self.cap = Capture(path, fmt)

    def node(
        self, key: str, kind: str, lineno: int, desc: str = "", guid: str | None = None, lid=None, own=False
    ) -> str:
        """The node `key`, made on first sight. `own`: the line is the node's own (its kind is certain there);
        a peer's kind is only inferred."""
        n = self.cap.nodes.get(key)
        if n is None:
            if len(self.cap.nodes) >= MAX_NODES:
                raise ParseError(
                    f"more than {MAX_NODES} fabric nodes: not a capture slurmkit reads", path=self.cap.path, line=lineno
                )
            n = self.cap.nodes[key] = Node(key, kind, desc, guid, lid, lineno)
        else:
            if own:
                n.kind = kind
            n.desc = n.desc or desc
            n.guid = n.guid or guid
            n.lid = n.lid if n.lid is not None else lid
        return key

    def see(self, s: Sighting) -> None:
        self.cap.sightings.append(s)


_KIND = {"S": "switch", "H": "ca", "R": "router", "SW": "switch", "CA": "ca", "RT": "router"}
_D = r"\d{1,6}"
_X = r"\[ext \d{1,4}\]"

# ---- ibnetdiscover (topology file) ----
_TOPO_NODE = re.compile(
    r'(Switch|Ca|Rt)\s+(\d{1,4})\s+"([SHR])-([^"]{1,64})"\s*'
    r'(?:#\s*"(.*)"(?:\s+(?:enhanced|base) port 0 lid (\d{1,6}) lmc \d{1,3})?.*)?'
)
_TOPO_SW_PORT = re.compile(
    rf'\[({_D})\](?:{_X})?\s+"([SHR])-([^"]{{1,64}})"\[({_D})\](?:{_X})?(?:\s*\(([^)]{{1,64}})\))?\s*'
    rf'#\s*"(.*)"\s+lid\s+({_D})\s+(\S+)(.*)'
)
_TOPO_CA_PORT = re.compile(
    rf'\[({_D})\](?:\(([^)]{{1,64}})\))?\s+"([SHR])-([^"]{{1,64}})"\[({_D})\](?:{_X})?(?:\s*\(([^)]{{1,64}})\))?\s*'
    rf'#\s*lid\s+({_D})\s+lmc\s+\d{{1,3}}\s+"(.*)"\s+lid\s+({_D})\s+(\S+)(.*)'
)
_TOPO_HEADER = re.compile(r"(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=\S{1,80}(?:\s+#.*)?")
_TOPO_SKIP = re.compile(r"(Chassis \d+.*|Non-Chassis Nodes|Hostname: .*)")


def _parse_topology(lines: list[tuple[int, str]], b: _Builder) -> None:
    cur: str | None = None  # key of the node whose [port] lines follow
    pending: int | None = None  # line of a record's first header line while its Switch/Ca line is awaited
    for n, line in lines:
        s = line.strip()
        if _TOPO_HEADER.fullmatch(s):
            if pending is None:
                pending, cur = n, None
            continue
        m = _TOPO_NODE.fullmatch(s)
        if m:
            kind = _KIND[m.group(3)]
            desc = m.group(5) or ""
            lid = int(m.group(6)) if m.group(6) else None
            cur = b.node(_key(m.group(3), m.group(4), desc), kind, n, desc, norm_guid(m.group(4)), lid)
            pending = None
            continue
        if _TOPO_SKIP.fullmatch(s):
            continue
        m = _TOPO_SW_PORT.fullmatch(s) or _TOPO_CA_PORT.fullmatch(s)
        if not m:
            raise ParseError(
                f"not an ibnetdiscover line: {s[:80]!r} (expected a vendid=/...guid= header, a Switch/Ca/Rt line "
                f'or a [port] link line such as [1] "H-0002c903000d81f8"[1](2c903000d81f9) # "n1 HCA-1" lid 4 4xEDR)',
                path=b.cap.path,
                line=n,
            )
        if cur is None:
            what = f"the record from line {pending}" if pending else "no record"
            raise ParseError(
                f"a port line before its Switch/Ca line ({what}): cut or out of order", path=b.cap.path, line=n
            )
        if m.re is _TOPO_SW_PORT:
            port, pk, pguid, pport, _pg, pdesc, plid, rate, _rest = m.groups()
        else:
            port, _own, pk, pguid, pport, _pg, own_lid, pdesc, plid, rate, _rest = m.groups()
            b.cap.nodes[cur].lid = b.cap.nodes[cur].lid or int(own_lid)
        width, speed = _rate(rate)
        peer = b.node(_key(pk, pguid, pdesc), _KIND[pk], n, pdesc, norm_guid(pguid), None)
        if _KIND[pk] == "switch":
            b.cap.nodes[peer].lid = b.cap.nodes[peer].lid or int(plid)
        b.see(Sighting(cur, int(port), peer, int(pport), width, speed, n))
    if pending is not None:
        raise ParseError(
            f"the record that starts at line {pending} has no Switch/Ca line: the capture is cut short",
            path=b.cap.path,
            line=lines[-1][0] if lines else None,
        )


# ---- ibnetdiscover -p ----
_P_END = r"(CA|SW|RT)\s+(\d{1,6})\s+(\d{1,4})\s+0x([0-9a-fA-F]{1,16})"
_P_LINK = re.compile(rf"{_P_END}\s+(\S+)\s+(\S+)\s+-\s+{_P_END}\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)")
_P_NONE = re.compile(rf"{_P_END}\s+(\S+)\s+(\S+)\s+'(.*)'")


def _parse_ports(lines: list[tuple[int, str]], b: _Builder) -> None:
    for n, line in lines:
        s = line.strip()
        m = _P_LINK.fullmatch(s)
        if m:
            t, lid, port, guid, w, sp, pt, plid, pport, pguid, desc, pdesc = m.groups()
            a = b.node(f"{t}-{norm_guid(guid)}", _KIND[t], n, desc, norm_guid(guid), int(lid))
            z = b.node(f"{pt}-{norm_guid(pguid)}", _KIND[pt], n, pdesc, norm_guid(pguid), int(plid))
            width, speed = _rate(w + sp)
            b.see(Sighting(a, int(port), z, int(pport), width, speed, n))
            continue
        m = _P_NONE.fullmatch(s)
        if m:
            t, lid, port, guid, w, sp, desc = m.groups()
            a = b.node(f"{t}-{norm_guid(guid)}", _KIND[t], n, desc, norm_guid(guid), int(lid))
            width, speed = _rate(w + sp)
            b.see(Sighting(a, int(port), None, None, width, speed, n, state="down"))
            continue
        raise ParseError(
            f"not an `ibnetdiscover -p` line: {s[:80]!r} (expected `CA 134 1 0xGUID 4x EDR - SW 1719 10 0xGUID "
            f"( 'a' - 'b' )` or a port with no peer)",
            path=b.cap.path,
            line=n,
        )


# ---- iblinkinfo ----
_L_HEAD = re.compile(r"(CA|Switch|Router): (?:0x([0-9a-fA-F]{1,16}) )?(.*):")
_L_PORT = re.compile(
    rf"(?:0x([0-9a-fA-F]{{1,16}})\s+(?:\"(.*?)\"\s+)?)?({_D})\s+({_D})\[\s*\d{{0,4}}\s*\]\s+"
    r"==\(([^()]*(?:\(FDR10\))?[^()]*)\)(?:\s*\(HOQ:[^)]*\))?==>\s*(.*)"
)
_L_PEER = re.compile(rf"(?:0x([0-9a-fA-F]{{1,16}})\s+)?({_D})\s+({_D})\[\s*\d{{0,4}}\s*\]\s+\"(.*)\"\s+\((.*)\)")
_L_NOPEER = re.compile(r'(\[\s*\]\s+""\s+\(\s*\)|"Port not available")')
_L_LINK = re.compile(r"(\d{1,2})X\s+(.*?Gbps(?:\s*\(FDR10\))?)\s+(\w+)/\s*([\w ]+?)")
_L_DOWN = re.compile(r"(\w+)/\s*([\w ]+?)")
_HCA_DESC = re.compile(r"\S+\s+(HCA-\d+|mlx\d_\d+|\S*_\d+)")


def _parse_iblinkinfo(lines: list[tuple[int, str]], b: _Builder) -> None:
    head: tuple[str, str, str | None] | None = None  # (kind, desc, guid) of the last CA:/Switch: header
    for n, line in lines:
        s = line.strip()
        m = _L_HEAD.fullmatch(s)
        if m:
            kind = {"CA": "ca", "Switch": "switch", "Router": "router"}[m.group(1)]
            head = (kind, m.group(3), norm_guid(m.group(2)) if m.group(2) else None)
            continue
        m = _L_PORT.fullmatch(s)
        if not m:
            raise ParseError(
                f"not an iblinkinfo line: {s[:80]!r} (expected `CA: desc:`, `Switch: 0xGUID desc:` or a port line "
                f'such as `2   17[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>  4    1[  ] "n02 HCA-1" ( )`)',
                path=b.cap.path,
                line=n,
            )
        guid, ldesc, lid, port, link, rest = m.groups()
        # a CA's port line starts with its port GUID, a switch's with its LID; in line mode (-l) every line starts
        # with the GUID and the description, and only the description tells a host from a switch
        if ldesc is not None:
            kind = "ca" if _HCA_DESC.fullmatch(ldesc.strip()) else "switch"
        else:
            kind = "ca" if guid else "switch"
        hd = head if head is not None and head[0] in (kind, "router") else None
        desc = ldesc.strip() if ldesc is not None else (hd[1] if hd else "")
        own_guid = norm_guid(guid) if guid else (hd[2] if hd else None)
        me = b.node(f"L{int(lid)}", hd[0] if hd else kind, n, desc, own_guid, int(lid), own=True)
        lk = _L_LINK.fullmatch(link.strip())
        if lk is None:
            dn = _L_DOWN.fullmatch(link.strip())
            if dn is None or not _L_NOPEER.fullmatch(rest.strip()):
                raise ParseError(f"unreadable link state {link.strip()[:60]!r}", path=b.cap.path, line=n)
            b.see(Sighting(me, int(port), None, None, None, None, n, "down", "", dn.group(1), dn.group(2).strip()))
            continue
        width, speed = int(lk.group(1)), _iblink_speed(lk.group(2))
        states = (lk.group(3), lk.group(4).strip())
        if _L_NOPEER.fullmatch(rest.strip()):
            b.see(Sighting(me, int(port), None, None, width, speed, n, "up", "", *states))
            continue
        p = _L_PEER.fullmatch(rest.strip())
        if p is None:
            raise ParseError(
                f'unreadable peer {rest.strip()[:60]!r} (expected `LID PORT[  ] "desc" ( )`)', path=b.cap.path, line=n
            )
        pguid, plid, pport, pdesc, hint = p.groups()
        pkind = "switch" if kind == "ca" else ("ca" if _HCA_DESC.fullmatch(pdesc.strip()) else "switch")
        peer = b.node(f"L{int(plid)}", pkind, n, pdesc.strip(), None, int(plid))
        b.see(Sighting(me, int(port), peer, int(pport), width, speed, n, "up", hint.strip(), *states))


def detect(lines: list[tuple[int, str]]) -> str:
    for _n, line in lines:
        s = line.strip()
        if _P_LINK.fullmatch(s) or _P_NONE.fullmatch(s):
            return "ibnetdiscover-ports"
        if _L_HEAD.fullmatch(s) or "==(" in s:
            return "iblinkinfo"
        return "ibnetdiscover"
    return "ibnetdiscover"


def parse(text: str, path: str = "<capture>", *, limit: int = MAX_BYTES) -> Capture:
    """Capture text -> Capture. ParseError (exit 2) for what is not one of the three formats, a capture cut inside
    a record, or one over the bounds; an empty capture is an error too (no fabric is not a healthy fabric)."""
    if len(text) > limit:
        raise ParseError(f"capture is {len(text)} characters, over the limit of {limit}", path=path)
    lines: list[tuple[int, str]] = []
    elided: list[int] = []
    for n, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE:
            raise ParseError(f"line of {len(line)} characters, over the limit of {MAX_LINE}", path=path, line=n)
        if "\x00" in line:
            raise ParseError("NUL byte: not a text capture", path=path, line=n)
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("..."):
            elided.append(n)
            continue
        lines.append((n, line))
    if not lines:
        raise ParseError(
            "no fabric in this capture (expected ibnetdiscover, ibnetdiscover -p or iblinkinfo output)", path=path
        )
    fmt = detect(lines)
    b = _Builder(path, fmt)
    {"ibnetdiscover": _parse_topology, "ibnetdiscover-ports": _parse_ports, "iblinkinfo": _parse_iblinkinfo}[fmt](
        lines, b
    )
    b.cap.elided = elided
    return b.cap
