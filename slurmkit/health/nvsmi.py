"""Pure parsers for nvidia-smi output: `-q` text (drivers 418 to 590), `--query-*` CSV, `-L`, error lines.

`-q` is turned into a tree by indentation, per GPU, without a schema: layouts differ between drivers ("Ecc Mode"
vs "ECC Mode", "Single Bit"/"Double Bit" blocks vs "SRAM/DRAM" counters, partial excerpts without a GPU header),
so the checks look fields up by path, case-insensitively. `N/A`, `[N/A]`, `[Not Supported]` stay strings here;
`base.to_int` turns them into None.
"""

from __future__ import annotations

import re

from ..errors import UsageError

# `-q` nests sections 5 deep at most (GPU > ECC Errors > Volatile > SRAM Uncorrectable > ...); a capture nested
# deeper is not nvidia-smi output (1,000 levels made Node.walk recurse past Python's limit): refused with its line
MAX_DEPTH = 32
# an 8-GPU `-q` is ~2,500 lines (a thousand processes per GPU add 6 lines each); the tree costs ~1 KB a line
MAX_LINES = 100_000

_GPU_HDR = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_L_HEAD = re.compile(r"GPU\s+(\d{1,3}):\s")
# What nvidia-smi prints instead of data when a GPU is gone (real captures in tests/fixtures/xid and misc/): each
# pattern with a literal every match of it contains (tests/unit/health/kernlog/test_anchors.py checks that), so healthy output,
# which holds none of them, is passed by C string searches and no pattern is compiled or run
_ERRORS = (
    (
        "Unable to determine the device handle",
        re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+)?:?\s*(.*)"),
    ),
    ("No devices were found", re.compile(r"(No devices were found)")),
    (
        "NVIDIA-SMI has failed",
        re.compile(r"(NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.*)"),
    ),
    ("Failed to initialize NVML: ", re.compile(r"(Failed to initialize NVML: .*)")),
    ("Error: ", re.compile(r"Error: (nvml\w+\(\): .*)")),
    ("FAILED to get details on GPU ", re.compile(r"(FAILED to get details on GPU .*)")),
    ("GPU is lost", re.compile(r"(GPU is lost\..*)")),
)


def errors(text: str) -> list[str]:
    """nvidia-smi's own error lines (a GPU that fell off the bus, a driver that is not loaded)."""
    if not any(lit in text for lit, _ in _ERRORS):
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        for lit, pat in _ERRORS:
            if lit in line and pat.search(line):
                out.append(line)
                break
    return out


class Node(dict):
    """A `-q` section: key -> str value or Node. Repeated keys get ' #2', ' #3' suffixes; `order` keeps them."""

    def __init__(self):
        super().__init__()
        self.order: list[tuple[str, object]] = []
        self._next: dict[str, int] = {}  # key -> the next ' #N' suffix: a thousand processes stay linear

    def add(self, key: str, value) -> None:
        k, n = key, self._next.get(key, 2)
        if k in self:
            k = f"{key} #{n}"
            while k in self:  # only when a key itself looks like 'X #N'
                n += 1
                k = f"{key} #{n}"
            n += 1
        self._next[key] = n
        self[k] = value
        self.order.append((key, value))

    def get_ci(self, *path: str):
        """Case-insensitive lookup of a path of keys; None when any step is missing."""
        cur: object = self
        for p in path:
            if not isinstance(cur, Node):
                return None
            nxt = cur.get(p)  # the usual spelling: no scan
            if nxt is None:
                pl = p.lower()
                for k, v in cur.items():
                    if k.lower() == pl:
                        nxt = v
                        break
            if nxt is None:
                return None
            cur = nxt
        return cur

    def readable(self) -> bool:
        """Does any field hold a value (not N/A, [Not Supported], Unknown Error)? An all-N/A GPU reads nothing."""
        from .base import is_na

        return any(not is_na(v) for _, v in self.walk())

    def lost(self) -> bool:
        """Does any field read "GPU is lost" (NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus or stopped answering)?
        nvidia-smi still lists such a GPU and fills its other fields from what the driver cached."""
        return any(isinstance(v, str) and v.strip().lower() == "gpu is lost" for _, v in self.walk())

    def walk(self, prefix: tuple[str, ...] = ()):
        """(path, value) for every leaf, in file order. Iterative: no depth of nesting recurses."""
        todo = [(prefix, iter(self.order))]
        while todo:
            pre, it = todo[-1]
            for k, v in it:
                if isinstance(v, Node):
                    todo.append((pre + (k,), iter(v.order)))
                    break
                yield pre + (k,), v
            else:
                todo.pop()


_Q_CACHE: dict[str, dict | UsageError] = {}


def parse_q(text: str) -> dict:
    """Memoized: five checks read the same `nvidia-smi -q` text in one prolog. The result is shared: read-only.
    Text that cannot be `-q` output (nested past MAX_DEPTH) raises NoData (a UsageError) naming its line."""
    got = _Q_CACHE.get(text)
    if got is None:
        if len(_Q_CACHE) > 8:
            _Q_CACHE.clear()
        try:
            got = _parse_q(text)
        except UsageError as e:
            got = e
        _Q_CACHE[text] = got
    if isinstance(got, UsageError):
        from .context import NoData

        raise NoData(got.message, line=got.line)
    return got


def _is_field(s: str) -> bool:
    """`Key : value`, `Key :` or `Key : ` (the first ':' with blanks around it): a field, else a section title.
    Linear: the regex this replaces (`^[^:]+?\\s+:\\s`) took seconds on one long line of blanks."""
    i = s.find(":")
    if i < 1:
        return False
    return s[i - 1].isspace() and (i + 1 == len(s) or s[i + 1].isspace())


def unreadable(text: str) -> str | None:
    """Why live `nvidia-smi -q` output says nothing a check can read (exit 0 with nothing printed, or with no
    `GPU xxxx:xx:xx.x` section and none of nvidia-smi's own error lines), else None. Such output is a finding."""
    try:
        q = parse_q(text)
    except UsageError as e:
        return f"{e.message} (line {e.line})" if e.line else e.message
    named = [g for g in q["gpus"] if g["bus_id"]]
    if q["errors"] or any(_KNOWN & {k.lower() for k in g["tree"]} for g in named):
        return None
    if named:
        return f"{len(named)} GPU section(s) with none of nvidia-smi's fields (Product Name, PCI, ECC Mode ...)"
    if not text.strip():
        return "it printed nothing"
    return f"no GPU section in {len(text)} bytes, first line {excerpt(text)!r}"


# fields of a GPU section every driver prints (418 to 590), or one `-q -d SECTION` prints: a GPU section with
# none of them holds nothing a check can read
_KNOWN_FIELDS = (
    "product name|product brand|product architecture|display mode|persistence mode|mig mode|driver model|"
    "serial number|gpu uuid|minor number|vbios version|pci|fb memory usage|ecc mode|ecc errors|retired pages|"
    "remapped rows|temperature|clocks|processes|utilization|power readings|gpu power readings|fan speed|"
    "performance state|gpu recovery action"
)
_KNOWN = set(_KNOWN_FIELDS.split("|"))


def excerpt(text: str, width: int = 40) -> str:
    """The first non-blank line, printable ASCII only (a drain reason and a log line must stay one plain line)."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return "".join(c if " " <= c <= "~" else "?" for c in first[:width]) + ("..." if len(first) > width else "")


def _parse_q(text: str) -> dict:
    """`nvidia-smi -q` text -> {"driver_version", "cuda_version", "attached", "gpus": [{"bus_id", "tree"}],
    "errors": [...]}. A partial excerpt without `GPU xxxx:xx:xx.x` headers becomes one GPU with bus_id None."""
    if text.count("\n") > MAX_LINES:  # counted before any line is split off
        raise UsageError(f"more than {MAX_LINES} lines (nvidia-smi -q prints ~300 a GPU)", line=MAX_LINES + 1)
    top = Node()
    gpus: list[dict] = []
    stack: list[tuple[int, Node]] = [(-1, top)]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        s = line.strip()
        if not s or s.startswith("====") or s in ("[...]", "...", "…"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = _GPU_HDR.match(s)
        if m and indent == 0:
            node = Node()
            gpus.append({"bus_id": m.group(1), "tree": node})
            stack = [(-1, node)]
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if " : " in s or s.endswith(" :") or _is_field(s):
            key, _, value = s.partition(":")
            # keys never contain ':' in -q output; values may ("00000000:18:00.0")
            parent.add(key.strip(), value.strip())
        else:
            if len(stack) > MAX_DEPTH:
                raise UsageError(
                    f"sections nested more than {MAX_DEPTH} levels deep (nvidia-smi -q nests 5): not nvidia-smi output",
                    line=lineno,
                )
            node = Node()
            parent.add(s, node)
            stack.append((indent, node))
    if not gpus and (len(top) > 0):
        # an excerpt (`-q -d ECC`, a section pasted alone): the whole text is one GPU we cannot name
        meta_keys = {"timestamp", "driver version", "cuda version", "attached gpus"}
        if any(k.lower() not in meta_keys for k in top):
            gpus.append({"bus_id": None, "tree": top})
    return {
        "driver_version": _v(top.get_ci("Driver Version")),
        "cuda_version": _v(top.get_ci("CUDA Version")),
        "attached": _s(top.get_ci("Attached GPUs")),
        "gpus": gpus,
        "errors": errors(text),
    }


def _s(v):
    return v if isinstance(v, str) else None


def _v(v):
    """A string value that says something: 'N/A' and friends are None."""
    from .base import is_na

    return v if isinstance(v, str) and not is_na(v) else None


def short_bus(bus_id: str | None) -> str | None:
    """'00000000:3B:00.0' -> '0000:3b:00' (the form the kernel log uses)."""
    if not bus_id:
        return bus_id
    b = bus_id.lower()
    if b.endswith(".0"):
        b = b[:-2]
    parts = b.split(":")
    if len(parts) == 3 and len(parts[0]) == 8:
        parts[0] = parts[0][4:]
    return ":".join(parts)


def parse_csv(text: str, columns: list[str] | None = None) -> list[dict]:
    """`--query-gpu=... --format=csv[,noheader][,nounits]` -> [{column: value}]. With a header the columns come
    from it (units like ' [MiB]' dropped); with noheader pass `columns`. Lines like `[...]` (an author's elision)
    and trailing `# comments` are skipped."""
    rows = []
    header = columns
    for raw in text.splitlines():
        line = _uncomment(raw).strip()
        if not line or line.strip("[]. …") == "":
            continue
        cells = [c.strip() for c in line.split(",")]
        if header is None:
            header = [c[: c.find("[")].strip() if c.endswith("]") and "[" in c else c for c in cells]
            continue
        if len(cells) != len(header):
            continue
        rows.append(dict(zip(header, cells)))
    return rows


def _uncomment(line: str) -> str:
    """The line without a trailing `# comment` (a '#' after a blank). A scan, not `\\s+#.*$`: that regex backtracks
    quadratically over a long run of blanks."""
    i = line.find("#")
    while i > 0:
        if line[i - 1].isspace():
            return line[:i]
        i = line.find("#", i + 1)
    return line


def looks_like_csv(text: str) -> bool:
    """A `--query-*` CSV (with its header, or a one-column header like `ecc.errors.uncorrected.volatile.total`)."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return ("," in first and " : " not in first) or bool(re.match(r"^[a-z_]+(\.[a-z_]+)+$", first))


def parse_list(text: str) -> list[dict]:
    """`nvidia-smi -L` -> [{"index": 0, "name": ..., "uuid": ...}]."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        m = _L_HEAD.match(line)
        # `GPU 0: NAME (UUID: GPU-...)`, read by position: a lazy regex over NAME backtracked on long blank runs
        if m is None or not line.endswith(")"):
            continue
        u = line.find("(UUID:", m.end() - 1)
        if u < 0:
            continue
        uuid = line[u + 6 : -1].strip()
        if ")" not in uuid:
            out.append({"index": int(m.group(1)), "name": line[m.end() : u].strip(), "uuid": uuid})
    return out


def processes(tree: Node) -> list[dict]:
    """The `Processes` block of one GPU: [{"pid": int, "name": str, "used_mib": int|None}]."""
    procs = tree.get_ci("Processes")
    if not isinstance(procs, Node):
        return []
    out: list[dict] = []
    cur: dict | None = None
    for path, value in procs.walk():
        key = path[-1].split(" #")[0].lower()
        if key == "process id":
            from .base import to_int

            pid = to_int(value) if value.isascii() and value.isdigit() else None
            cur = {"pid": pid if pid is not None else value, "name": None, "used_mib": None}
            out.append(cur)
        elif cur is not None and key == "name":
            cur["name"] = value
        elif cur is not None and key == "used gpu memory":
            from .base import to_int

            cur["used_mib"] = to_int(value)
    # older layout: "Process ID" as a header line of its own block
    for k, v in procs.items():
        if k.lower().startswith("process id") and isinstance(v, Node) and not out:
            out.append({"pid": k, "name": _s(v.get_ci("Name")), "used_mib": None})
    return out
