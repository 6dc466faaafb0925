"""Parse `nvidia-smi topo -m` (and `-mp`) into a Topology. Pure: text in, data out, UsageError(path, line) on
anything it cannot trust.

Handles every layout seen in the field (tests/fixtures/topo/): old and new legends; NIC columns named NICn with a
"NIC Legend" or named mlx5_n directly; CPU Affinity / NUMA Affinity / GPU NUMA ID present or absent; empty or N/A
affinities; cpu ranges; real tabs or tabs expanded to spaces by a paste; the extra empty field nvidia-smi prints
before GPU NUMA ID (and, on some drivers, before an N/A NUMA Affinity); underline escape codes (or their remnants,
`[4m`, once the ESC byte is lost) around the header; CRLF; stray lines before the header (srun's "queued" lines);
NIC rows shorter than GPU rows. Column-merged pastes ("NIC8NIC9", "NODENODE"), unknown link tokens, a broken
diagonal, an asymmetric matrix, or a GPU row whose affinity fields are laid out unlike the other GPU rows are
errors naming the line: never a silently wrong matrix. Tested by deleting every tab (and every tab stop of spaces)
of every real capture: each damaged copy is refused or parses to the same result. Residual risk: a ONE-GPU capture
that lost the tab between its CPU and NUMA affinity has no other row to be checked against.
"""

from __future__ import annotations

import re

from ..errors import UsageError
from .model import NV_RE, PATH_RANK, Gpu, Nic, Topology, format_cpulist, parse_cpulist, small_int

# ESC[...m and its remnant once a copy/paste dropped the ESC byte.
_ESCAPE_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\[[0-9;]{1,8}m")
_HEADER_TOKEN_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_GPU_RE = re.compile(r"\AGPU([0-9]{1,4})\Z")
_NICN_RE = re.compile(r"\ANIC([0-9]{1,4})\Z")
_NIC_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
_MERGED_RE = re.compile(r"^(GPU|NIC)\d+(GPU|NIC|mlx5_)\d+$|^(?:mlx5_\d+){2,}$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
AFFINITY_COLS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_TOKEN_MERGED_RE = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|NV\d+){2,}$")


def strip_escapes(line: str) -> str:
    return _ESCAPE_RE.sub("", line)


def _valid_token(tok: str) -> bool:
    return tok in PATH_RANK or bool(NV_RE.match(tok))


def _fields(line: str) -> list[str] | None:
    """A row's fields, keeping empty ones. Real tabs split as they are; a line whose tabs a paste expanded to
    spaces is cut back into fields by its 8-column tab stops. None when a space line is not on tab stops."""
    if "\t" in line:
        return line.split("\t")
    fields: list[str] = []
    prev_end = None
    for m in re.finditer(r"\S+", line):
        s, e = m.start(), m.end()
        text = m.group()
        fstart = s
        if s % 8:
            # " X " is printed with a leading space: the field still starts at the tab stop before it.
            if text == "X" and s % 8 == 1 and line[s - 1] == " ":
                fstart = s - 1
            else:
                return None
        if prev_end is None:
            if fstart != 0:
                fields.append("")  # a header/row never starts indented except the header's empty corner
                fields.extend([""] * (fstart // 8 - 1))
        else:
            stop = (prev_end // 8 + 1) * 8
            if fstart < stop:
                return None
            fields.extend([""] * ((fstart - stop) // 8))
        fields.append(text)
        # " X " occupies three columns: the tab that follows starts after its trailing space
        prev_end = e + 1 if text == "X" and line[e : e + 1] == " " else e
    return fields


def _split_gpu_affinity(vals: list[str], cols: list[str], lineno: int, path) -> dict[str, str]:
    """Map the fields after the matrix to the affinity columns named in the header.

    nvidia-smi prints CPU and NUMA affinity one tab apart and GPU NUMA ID two tabs after (an extra empty field);
    some drivers print an N/A NUMA Affinity two tabs after CPU Affinity as well. Only those layouts are accepted:
    any other count of fields could put a value under the wrong column."""
    vals = [v.strip() for v in vals]
    if cols == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]:
        layouts: list[list[str | None]] = [
            ["CPU Affinity", "NUMA Affinity", None, "GPU NUMA ID"],
            ["CPU Affinity", None, "NUMA Affinity", None, "GPU NUMA ID"],
            ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"],
        ]
    elif cols == ["CPU Affinity", "NUMA Affinity"]:
        layouts = [["CPU Affinity", "NUMA Affinity"], ["CPU Affinity", None, "NUMA Affinity"]]
    else:
        layouts = [list(cols)]
    trimmed = list(vals)
    while True:
        for layout in layouts:  # None marks a field that must be empty
            if len(layout) == len(trimmed) and not any(name is None and v for name, v in zip(layout, trimmed)):
                out = {name: v for name, v in zip(layout, trimmed) if name is not None}
                out[""] = str(len(layout))  # which layout matched, for the cross-row check
                return out
        if trimmed and trimmed[-1] == "":  # a trailing tab some drivers print
            trimmed.pop()
            continue
        break
    raise UsageError(
        f"cannot tell which of {', '.join(cols) or 'no affinity column'} the fields "
        f"{vals!r} after the matrix belong to (expected {len(cols)} value(s) in nvidia-smi's layout)",
        path=path,
        line=lineno,
    )


MAX_DEVICES = 1024  # columns of a matrix: far past any node (an 8-GPU node with 8 NICs has 16)


def parse_topo(text: str, path: str | None = None) -> Topology:
    """Parse `nvidia-smi topo -m` output. Raises UsageError naming path:line for anything it cannot trust."""
    where = path or "<topo>"
    lines = [strip_escapes(ln.rstrip("\r\n").rstrip("\r")) for ln in text.splitlines()]
    hdr_i = _find_header(lines, where)
    cols = _Columns(_HEADER_TOKEN_RE.findall(lines[hdr_i]), where, hdr_i + 1)
    gpu_rows, nic_rows, end = _read_rows(lines, hdr_i, cols, where)
    nic_legend, legend = _legends(lines, end, where)
    gpus = _build_gpus(cols, gpu_rows, where)
    _check_symmetry(cols, gpu_rows, nic_rows, where)
    nics, warnings = _nics(cols, nic_rows, nic_legend, where)
    topo = Topology(gpus=gpus, nics=nics, warnings=warnings, source=path)
    if legend["seen"] and legend["pix"] and not legend["nv"]:
        if not any(NV_RE.match(t) for g in gpus for t in g.links.values()):
            topo.nvlink_shown = False
            warnings.append(
                "legend has no NV# line: this is `nvidia-smi topo -mp` (PCIe paths only); NVLink, if "
                "any, is not shown, so the interconnect below may understate the node"
            )
    warnings.extend(topology_warnings(topo))
    return topo


def _find_header(lines: list[str], where: str) -> int:
    """1. the header: the first line whose first column names GPU0."""
    for i, ln in enumerate(lines):
        toks = _HEADER_TOKEN_RE.findall(ln)
        if toks and toks[0] == "GPU0" and (len(toks) == 1 or not _valid_token(toks[1])):
            return i
        if toks and toks[0].startswith("GPU0") and _MERGED_RE.match(toks[0]):
            return i
    raise UsageError("no `nvidia-smi topo -m` header found (a line of column names starting with GPU0)", path=where)


class _Columns:
    """The header's columns, checked: devices (GPUs, then NICs) and the affinity columns after them."""

    def __init__(self, names: list[str], where: str, hline: int):
        if len(names) > MAX_DEVICES:
            raise UsageError(
                f"the header has {len(names)} columns, over the limit of {MAX_DEVICES}", path=where, line=hline
            )
        dev_cols: list[str] = []
        aff_cols: list[str] = []
        for name in names:
            if name in AFFINITY_COLS:
                if name in aff_cols:
                    raise UsageError(f"column {name!r} appears twice in the header", path=where, line=hline)
                aff_cols.append(name)
                continue
            if aff_cols:
                raise UsageError(f"unexpected column {name!r} after the affinity columns", path=where, line=hline)
            if _MERGED_RE.match(name):
                raise UsageError(
                    f"column name {name!r} looks like two columns run together (a tab lost in a "
                    f"paste); the matrix cannot be trusted",
                    path=where,
                    line=hline,
                )
            if not (_GPU_RE.match(name) or _NIC_NAME_RE.match(name)):
                raise UsageError(f"unexpected column name {name!r}", path=where, line=hline)
            if name in dev_cols:
                raise UsageError(f"column {name!r} appears twice in the header", path=where, line=hline)
            dev_cols.append(name)
        order = [c for c in AFFINITY_COLS if c in aff_cols]
        if aff_cols != order:
            raise UsageError(f"affinity columns out of the usual order: {aff_cols}", path=where, line=hline)
        gpu_cols = [c for c in dev_cols if _GPU_RE.match(c)]
        nic_cols = [c for c in dev_cols if not _GPU_RE.match(c)]
        if dev_cols[: len(gpu_cols)] != gpu_cols:
            raise UsageError("GPU columns must come before NIC columns", path=where, line=hline)
        if gpu_cols != [f"GPU{i}" for i in range(len(gpu_cols))]:
            raise UsageError(
                f"GPU columns are not GPU0..GPU{len(gpu_cols) - 1} in order: {' '.join(gpu_cols)}",
                path=where,
                line=hline,
            )
        nicn = [c for c in nic_cols if _NICN_RE.match(c)]
        if nicn and nicn != [f"NIC{i}" for i in range(len(nicn))]:
            raise UsageError(
                f"NIC columns are not NIC0..NIC{len(nicn) - 1} in order: {' '.join(nicn)} (a column lost or merged?)",
                path=where,
                line=hline,
            )
        self.dev, self.aff, self.gpu, self.nic, self.nicn = dev_cols, aff_cols, gpu_cols, nic_cols, nicn
        self.index = {c: i for i, c in enumerate(dev_cols)}


def _read_rows(lines: list[str], hdr_i: int, cols: _Columns, where: str):
    """2. the rows, up to the first blank line: ({GPUn: (line, cells, affinity)}, {NIC: (line, cells)}, end)."""
    dev_cols, aff_cols = cols.dev, cols.aff
    ncols = len(dev_cols)
    gpu_rows: dict[str, tuple[int, list[str], dict[str, str]]] = {}
    nic_rows: dict[str, tuple[int, list[str]]] = {}
    row_shape = None
    i = hdr_i + 1
    while i < len(lines) and lines[i].strip():
        ln = lines[i]
        lineno = i + 1
        f = _fields(ln)
        if f is None:
            toks = ln.split()
            f = toks  # spaces not on tab stops: only a row without empty fields can be read
            loose = True
        else:
            loose = False
        label = f[0].strip() if f else ""
        if label not in cols.index:
            if label.startswith("Legend") or label.startswith("NIC Legend"):
                break
            raise UsageError(f"row label {label[:80]!r} is not a column of the header", path=where, line=lineno)
        if label in gpu_rows or label in nic_rows:
            raise UsageError(f"row {label} appears twice", path=where, line=lineno)
        cells = [c.strip() for c in f[1 : 1 + ncols]]
        if len(cells) < ncols or any(c == "" for c in cells):
            merged = [c for c in f[1:] if _TOKEN_MERGED_RE.match(c.strip())]
            hint = f" ({merged[0]!r} looks like two cells run together)" if merged else ""
            raise UsageError(
                f"row {label} has {sum(1 for c in cells if c)} link cells, the header has {ncols} columns{hint}",
                path=where,
                line=lineno,
            )
        for col, tok in zip(dev_cols, cells):
            if col == label:
                if tok != "X":
                    raise UsageError(
                        f"row {label}: expected X on the diagonal, got {tok[:40]!r}", path=where, line=lineno
                    )
            elif not _valid_token(tok):
                hint = " (two cells run together: a tab lost in a paste?)" if _TOKEN_MERGED_RE.match(tok) else ""
                raise UsageError(f"row {label}, column {col}: unknown link {tok[:40]!r}{hint}", path=where, line=lineno)
        rest = f[1 + ncols :]
        if label in cols.gpu:
            if loose and len([r for r in rest if r.strip()]) != len(aff_cols):
                raise UsageError(
                    f"row {label}: spaces are not on 8-column tab stops and the affinity fields "
                    f"{rest!r} cannot be matched to {aff_cols}",
                    path=where,
                    line=lineno,
                )
            aff = _split_gpu_affinity(rest, aff_cols, lineno, where)
            # nvidia-smi prints every GPU row in the same layout (same number of fields after the matrix); a row
            # that differs lost or gained a tab, and its values may sit under the wrong column
            shape = (len(rest) if "\t" in ln else None, aff.pop(""))
            if row_shape is None:
                row_shape = (shape, label)
            elif shape != row_shape[0]:
                raise UsageError(
                    f"row {label} does not have the affinity layout of row {row_shape[1]} (fields "
                    f"{[r.strip() for r in rest]!r}): a tab lost or added (paste damage?)",
                    path=where,
                    line=lineno,
                )
            gpu_rows[label] = (lineno, cells, aff)
        else:
            if any(r.strip() for r in rest):
                raise UsageError(
                    f"NIC row {label}: unexpected fields after the matrix: {[r for r in rest if r.strip()]!r}",
                    path=where,
                    line=lineno,
                )
            nic_rows[label] = (lineno, cells)
        i += 1
    missing = [c for c in cols.gpu if c not in gpu_rows]
    if missing:
        raise UsageError(
            f"no row for {', '.join(missing)} (truncated capture?)", path=where, line=min(len(lines), i + 1)
        )
    return gpu_rows, nic_rows, i


def _legends(lines: list[str], start: int, where: str) -> tuple[dict[str, str], dict[str, bool]]:
    """3. legends after the matrix: the NIC Legend, and which legend lines are there (-m or -mp)."""
    nic_legend: dict[str, str] = {}
    seen = {"seen": False, "nv": False, "pix": False}
    for j in range(start, len(lines)):
        ln = lines[j]
        s = ln.strip()
        if s.startswith("Legend"):
            seen["seen"] = True
        elif s.startswith("NV#"):
            seen["nv"] = True
        elif s.startswith("PIX"):
            seen["pix"] = True
        m = _NIC_LEGEND_RE.match(ln)
        if m:
            if m.group(1) in nic_legend:
                raise UsageError(f"{m.group(1)} appears twice in the NIC Legend", path=where, line=j + 1)
            nic_legend[m.group(1)] = m.group(2)
    return nic_legend, seen


def _build_gpus(cols: _Columns, gpu_rows, where: str) -> list[Gpu]:
    """4. build the model: each GPU's links, CPU and NUMA affinity, GPU NUMA ID."""
    gpus: list[Gpu] = []
    for gi, col in enumerate(cols.gpu):
        lineno, cells, aff = gpu_rows[col]
        links = {c: t for c, t in zip(cols.dev, cells) if c != col}
        cpu_text = aff.get("CPU Affinity", "")
        cpus: list[int] = []
        if cpu_text and cpu_text != "N/A":
            parsed = parse_cpulist(cpu_text)
            if parsed is None:
                raise UsageError(
                    f"{col}: CPU Affinity {cpu_text[:80]!r} is not a cpu list like 0-3,8", path=where, line=lineno
                )
            cpus = parsed
        numa_text = aff.get("NUMA Affinity", "")
        numa: list[int] = []
        if numa_text and numa_text != "N/A":
            parsed = parse_cpulist(numa_text)
            if parsed is None:
                raise UsageError(
                    f"{col}: NUMA Affinity {numa_text[:80]!r} is not a node list like 0 or 0-1", path=where, line=lineno
                )
            numa = parsed
        gnid_text = aff.get("GPU NUMA ID", "")
        gnid = None
        if gnid_text and gnid_text != "N/A":
            gnid = small_int(gnid_text)
            if gnid is None:
                raise UsageError(
                    f"{col}: GPU NUMA ID {gnid_text[:40]!r} is not a number or N/A", path=where, line=lineno
                )
        gpus.append(
            Gpu(index=gi, cpus=cpus, numa=numa, links=links, gpu_numa_id=gnid, cpu_affinity_text=cpu_text, line=lineno)
        )
    return gpus


def _check_symmetry(cols: _Columns, gpu_rows, nic_rows, where: str) -> None:
    """A link read from a row must be the one read from the other device's row."""
    rows = {**{k: (v[0], v[1]) for k, v in gpu_rows.items()}, **nic_rows}
    order_seen = [c for c in cols.dev if c in rows]
    for ai, a in enumerate(order_seen):
        la, ra = rows[a]
        for b in order_seen[ai + 1 :]:
            lb, rb = rows[b]
            ta, tb = ra[cols.index[b]], rb[cols.index[a]]
            if ta != tb:
                raise UsageError(
                    f"matrix is not symmetric: {a}->{b} is {ta} (line {la}) but {b}->{a} is {tb} (line {lb})",
                    path=where,
                    line=max(la, lb),
                )


def _nics(cols: _Columns, nic_rows, nic_legend: dict[str, str], where: str) -> tuple[list[Nic], list[str]]:
    """The NICs with their device names (from the NIC Legend, or the column name itself), and warnings."""
    warnings: list[str] = []
    nics = []
    for c in cols.nic:
        if _NICN_RE.match(c):
            nics.append(Nic(name=c, device=nic_legend.get(c)))
        else:
            nics.append(Nic(name=c, device=c))
    unknown = [c for c in cols.nicn if c not in nic_legend]
    if unknown:
        warnings.append(
            f"no NIC Legend for {', '.join(unknown)}: their device names (mlx5_N) are unknown, so "
            f"NCCL_IB_HCA cannot name them"
        )
    extra = [k for k in nic_legend if k not in cols.nicn]
    if extra:
        raise UsageError(f"NIC Legend names {', '.join(extra)}, which the matrix has no column for", path=where)
    nic_missing = [c for c in cols.nic if c not in nic_rows]
    if nic_rows and nic_missing:
        warnings.append(
            f"no matrix row for {', '.join(nic_missing)} (truncated capture?); GPU-NIC links come from the GPU rows"
        )
    return nics, warnings


def _ranges(idx: list[int]) -> str:
    return "GPU" + format_cpulist(idx) if len(idx) != 1 else f"GPU{idx[0]}"


def topology_warnings(topo: Topology) -> list[str]:
    """What an admin should know from the matrix alone (CPU-layout warnings come from cpus.resolve)."""
    out: list[str] = []
    gpus = topo.gpus
    n = len(gpus)
    if n >= 2 and topo.interconnect == "pcie" and topo.nvlink_shown:
        sys_pairs = sum(
            1 for a in gpus for b in gpus if a.index < b.index and a.links.get(f"GPU{b.index}") in ("SYS", "SOC")
        )
        tail = f"; {sys_pairs} GPU pair(s) cross the CPU interconnect (SYS)" if sys_pairs else ""
        out.append(f"PCIe-only: no NVLink between the {n} GPUs; GPU-to-GPU traffic (NCCL) goes over PCIe{tail}")
    elif topo.interconnect == "partial-nvlink":
        out.append(
            "partial NVLink: only some GPU pairs are NVLink-connected; keep a task's GPUs within an NVLink group"
        )
    no_cpu = [g.index for g in gpus if not g.cpus]
    if no_cpu:
        out.append(
            f"{_ranges(no_cpu)}: no CPU Affinity in the matrix (container or cgroup view, or the "
            f"nvidia-smi interleaved-numbering quirk): CPU binding for them needs the CPU layout "
            f"(--lscpu-file)"
        )
    tiny = [g.index for g in gpus if 0 < len(g.cpus) <= 2]
    if tiny:
        texts = sorted({g.cpu_affinity_text for g in gpus if g.index in tiny})
        out.append(
            f"{_ranges(tiny)}: CPU Affinity lists only {'/'.join(texts)} (captured inside a restricted "
            f"cpuset such as a Slurm job, or the nvidia-smi interleaved-numbering quirk): not the GPU's "
            f"real CPU set"
        )
    no_numa = [g.index for g in gpus if not g.numa]
    if no_numa:
        out.append(f"{_ranges(no_numa)}: no NUMA Affinity in the matrix (N/A, empty or an old driver)")
    multi = [g.index for g in gpus if len(g.numa) > 1]
    if multi:
        out.append(
            f"{_ranges(multi)}: NUMA affinity spans nodes {format_cpulist(sorted({x for g in gpus if g.index in multi for x in g.numa}))}"
        )
    if n >= 4 and all(g.numa == [0] for g in gpus):
        cpus = [tuple(g.cpus) for g in gpus]
        if cpus[0] and len(set(cpus)) == 1 and list(cpus[0]) == list(range(len(cpus[0]))) and len(cpus[0]) >= 32:
            out.append(
                f"NUMA appears disabled (numa=off?): all {n} GPUs report NUMA node 0 and every CPU "
                f"(0-{len(cpus[0]) - 1}); GPU-CPU binding cannot help until NUMA is on"
            )
    return out
