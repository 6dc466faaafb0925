"""Readers for Slurm's JSON output (`sinfo --json`, `scontrol --json show node`, `squeue --json`), every version.

The reader is chosen by the version the document says it is (`meta`), never by trying shapes until one fits:

    data_parser  Slurm        sinfo --json                         scontrol --json show node / squeue --json
    v0.0.37/38   21.08/22.05  top-level `nodes`, one per node,     (scontrol: none) / `jobs`, job_state a string
                              `state` a string + `state_flags`
    v0.0.39      23.02        top-level `sinfo`: one entry per     `nodes`: one per node, `state` a list,
    v0.0.40-45   23.11-26.05  group of nodes of a partition with   `reason_changed_at` {set, infinite, number} /
                              the same state and gres in use:      `jobs`, job_state a list, exit_code a dict
                              `nodes.nodes` names, `node.state` a
                              list, `reason.{description,time,user}` (26.05: `reason_set_by_user`),
                              `gres.{total,used}`, `cpus` a dict

`sinfo --json` of 23.02+ keeps only the first node's reason, gres and cpus for a whole group (src/sinfo/sinfo.c
`_update_sinfo`): slurmkit reads live nodes there with `scontrol --json -d show node`, and a captured grouped
document whose out-of-service group of several nodes carries a reason is refused (that reason may be another
node's); an in-service group of several nodes gets no reason (24.11 keeps a resumed node's old reason, and the
group may hold it for a node that never had it).

Anything else (another version, a missing or mistyped field, Slurm's `errors` with no nodes) is a
SlurmFormatError that names the source, the version the document says and what was expected. Pure functions.
"""

from __future__ import annotations

import builtins  # _Reader has methods named str and int

import json
import re

from ..errors import ParseError
from ..times import slurm_local
from .records import JobRecord, NodeRecord, gres_gpu_count

SINFO_PER_NODE = (37, 38)  # v0.0.37 (21.08), v0.0.38 (22.05)
GROUPED = tuple(range(39, 46))  # v0.0.39 (23.02) .. v0.0.45 (26.05)
KNOWN = SINFO_PER_NODE + GROUPED
_BASE_STATES = {"IDLE", "MIXED", "ALLOCATED", "DOWN", "UNKNOWN", "FUTURE", "ERROR", "END"}
_OUT_FLAGS = {"DRAIN", "FAIL", "NOT_RESPONDING", "INVALID_REG"}
_EXPECTED = "data_parser v0.0.37 to v0.0.45 (Slurm 21.08 to 26.05)"


class SlurmFormatError(ParseError):
    """A Slurm document slurmkit does not recognise. `line` is where it starts in a captured file (or None)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message, line=line)


class Meta:
    """What a document says about itself: Slurm's release ('24.11.5') and the data_parser minor (42)."""

    def __init__(self, release: str | None, parser: int | None, parser_text: str | None):
        self.release, self.parser, self.parser_text = release, parser, parser_text

    def describe(self) -> str:
        slurm = f"Slurm {self.release}" if self.release else "no Slurm version"
        dp = self.parser_text or "no data_parser"
        return f"{slurm}, {dp}"


def _fail(source: str, meta: Meta | None, got: str, expected: str) -> SlurmFormatError:
    where = f" ({meta.describe()})" if meta else ""
    return SlurmFormatError(f"{source}{where}: {got}; expected {expected}")


def load(text: str, source: str) -> dict:
    """The JSON object in `text`, or a SlurmFormatError naming `source`."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise SlurmFormatError(f"{source}: not JSON ({e.__class__.__name__}: {str(e)[:200]})") from None
    if not isinstance(data, dict):
        raise SlurmFormatError(f"{source}: expected a JSON object with `meta`, got {type(data).__name__}")
    return data


def read_meta(data: dict) -> Meta:
    """meta.plugin.data_parser (23.11+), meta.plugins.data_parser (23.02), meta.plugin.type 'openapi/v0.0.38'
    (21.08/22.05); meta.slurm.release (23.11+) or meta.Slurm.release (older)."""
    meta = data.get("meta")
    if not isinstance(meta, dict):
        return Meta(None, None, None)
    text = None
    for key, field in (("plugin", "data_parser"), ("plugins", "data_parser"), ("plugin", "type")):
        d = meta.get(key)
        if isinstance(d, dict) and isinstance(d.get(field), str) and d[field]:
            text = d[field]
            break
    m = re.search(r"v0\.0\.(\d+)", text or "")
    parser = int(m.group(1)) if m else None
    release = None
    for key in ("slurm", "Slurm"):
        d = meta.get(key)
        if isinstance(d, dict):
            if isinstance(d.get("release"), str) and d["release"]:
                release = d["release"]
            elif isinstance(d.get("version"), dict):
                v = d["version"]
                parts = [v.get(k) for k in ("major", "minor", "micro")]
                if all(isinstance(p, (int, str)) and str(p).isdigit() for p in parts):
                    release = f"{int(parts[0]):02d}.{int(parts[1]):02d}.{parts[2]}"
            if release:
                break
    return Meta(release, parser, text)


# --- typed access: a field of the wrong type is the same clear error, never an AttributeError --------------------


class _Reader:
    def __init__(self, source: str, meta: Meta):
        self.source, self.meta = source, meta

    def fail(self, path: str, expected: str, got) -> SlurmFormatError:
        return _fail(self.source, self.meta, f"{path} is {_kind(got)}", expected)

    def obj(self, d: dict, key: str, path: str, *, required: bool = False) -> dict:
        v = d.get(key)
        if v is None and not required:
            return {}
        if not isinstance(v, dict):
            raise self.fail(f"{path}.{key}", "an object", v)
        return v

    def str(self, d: dict, key: str, path: str, *, required: bool = False) -> str:
        v = d.get(key)
        if v is None and not required:
            return ""
        if not isinstance(v, str):
            raise self.fail(f"{path}.{key}", "a string", v)
        return v

    def strs(self, d: dict, key: builtins.str, path: builtins.str) -> list[builtins.str]:
        """A list of strings; also a comma-separated string (older CSV fields)."""
        v = d.get(key)
        if v is None:
            return []
        if isinstance(v, str):
            return [p for p in v.split(",") if p]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(f"{path}.{key}", "a list of strings", v)
        return list(v)

    def int(self, d: dict, key: builtins.str, path: builtins.str) -> builtins.int | None:
        """An integer, or Slurm's {set, infinite, number} (None when unset or infinite)."""
        v = d.get(key)
        if isinstance(v, dict):
            if v.get("set") is False or v.get("infinite") is True:
                return None
            v = v.get("number")
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"{path}.{key}", "an integer or {set, infinite, number}", v)
        return int(v)

    def items(self, data: dict, key: builtins.str) -> list:
        v = data.get(key)
        if not isinstance(v, list):
            raise self.fail(key, f"a list under top-level `{key}`", v)
        for i, x in enumerate(v):
            if not isinstance(x, dict):
                raise self.fail(f"{key}[{i}]", "an object", x)
        return v


def _kind(v) -> str:
    if v is None:
        return "missing"
    name = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(v), type(v).__name__)
    return f"{name} ({json.dumps(v)[:60]})" if not isinstance(v, (dict, list)) else name


def _errors(data: dict) -> list[str]:
    """Slurm's own `errors` entries as text ('Unable to contact slurm controller (connect failure)')."""
    out = []
    errs = data.get("errors")
    for e in errs if isinstance(errs, list) else []:
        if isinstance(e, dict):
            msg = e.get("description") or e.get("error") or ""
            num = e.get("error_number", e.get("errno"))
            out.append(f"{msg}" + (f" (error {num})" if num not in (None, 0) else "") if msg else json.dumps(e)[:200])
        elif isinstance(e, str):
            out.append(e)
    return out


def _check_version(r: _Reader, allowed: tuple[int, ...], expected: str) -> None:
    if r.meta.parser not in allowed:
        got = (
            "no `meta` data_parser version"
            if r.meta.parser is None
            else f"data_parser v0.0.{r.meta.parser} is not one slurmkit reads"
        )
        raise _fail(r.source, r.meta, got, expected)


def _epoch_iso(v: int | None) -> str | None:
    if not v or v < 0:
        return None
    try:  # Slurm prints reason times in the controller's local time without a zone; do the same
        return slurm_local(int(v))
    except (OverflowError, OSError, ValueError):
        return None


def _split_state(r: _Reader, st, path: str) -> tuple[str, list[str]]:
    """'idle' / ['IDLE', 'DRAIN'] / ['DRAIN', 'IDLE'] -> ('IDLE', ['DRAIN'])."""
    if isinstance(st, str):
        words = [w for w in st.upper().split("+") if w]
    elif isinstance(st, list) and all(isinstance(w, str) for w in st):
        words = [w.upper() for w in st if w]
    else:
        raise r.fail(path, "a state string or a list of state strings", st)
    base = next((w for w in words if w in _BASE_STATES), None)
    if base is None:
        base = words[0] if words else "UNKNOWN"
    flags = [w for w in words if w != base]
    return base, list(dict.fromkeys(flags))


def _no_nodes(r: _Reader, data: dict, what: str) -> SlurmFormatError:
    errs = _errors(data)
    got = f"no {what}" + (f" and Slurm's errors: {'; '.join(errs)}" if errs else " and no errors")
    return _fail(r.source, r.meta, got, f"at least one {what[:-1]} from a controller that has nodes")


# --- per-node records: sinfo --json v0.0.37/38, scontrol --json show node v0.0.39+ --------------------------------


def _node(r: _Reader, n: dict, path: str) -> NodeRecord:
    name = r.str(n, "name", path, required=True)
    if not name:
        raise r.fail(f"{path}.name", "a node name", name)
    base, flags = _split_state(r, n.get("state"), f"{path}.state")
    for f in r.strs(n, "state_flags", path):  # v0.0.37/38: flags apart from the base state
        if f.upper() not in flags:
            flags.append(f.upper())
    reason = r.str(n, "reason", path).strip()
    user = r.str(n, "reason_set_by_user", path) if reason else ""
    when = r.int(n, "reason_changed_at", path) if reason else None
    gres = r.str(n, "gres", path)
    gres = "" if gres in ("(null)", "N/A") else gres
    used = r.str(n, "gres_used", path)
    used = "" if used in ("(null)", "N/A") else used
    return NodeRecord(
        name=name,
        state=base,
        flags=flags,
        reason=reason,
        reason_user=user or None,
        reason_time=_epoch_iso(when),
        gres=gres,
        gres_used=used,
        gpus_total=gres_gpu_count(gres),
        gpus_used=gres_gpu_count(used),
        partitions=r.strs(n, "partitions", path),
        cpus=r.int(n, "cpus", path),
        cpus_alloc=r.int(n, "alloc_cpus", path),
        boot_time=_epoch_iso(r.int(n, "boot_time", path)),
        last_busy=_epoch_iso(r.int(n, "last_busy", path)),
    )


def parse_scontrol_nodes_json(text: str, source: str = "scontrol --json show node") -> list[NodeRecord]:
    """`scontrol --json [-d] show node` (Slurm 23.02+, data_parser v0.0.39 to v0.0.45): one record per node.
    GresUsed is only there with `-d`."""
    data = load(text, source)
    r = _Reader(source, read_meta(data))
    _check_version(r, GROUPED, "`scontrol --json show node` of data_parser v0.0.39 to v0.0.45 (Slurm 23.02 to 26.05)")
    if "nodes" not in data:
        raise _fail(source, r.meta, "no top-level `nodes`", "`nodes`, one record per node")
    recs = [_node(r, n, f"nodes[{i}]") for i, n in enumerate(r.items(data, "nodes"))]
    if not recs:
        raise _no_nodes(r, data, "nodes")
    return recs


# --- sinfo --json --------------------------------------------------------------------------------------------------


def _group(r: _Reader, g: dict, path: str) -> list[NodeRecord]:
    nodes = r.obj(g, "nodes", path, required=True)
    names = r.strs(nodes, "nodes", f"{path}.nodes")
    base, flags = _split_state(r, r.obj(g, "node", path, required=True).get("state"), f"{path}.node.state")
    reason_d = g.get("reason")
    if isinstance(reason_d, str):
        reason_d = {"description": reason_d}
    elif reason_d is None:
        reason_d = {}
    elif not isinstance(reason_d, dict):
        raise r.fail(f"{path}.reason", "an object {description, time, user}", reason_d)
    reason = r.str(reason_d, "description", f"{path}.reason").strip()
    user = (r.str(g, "reason_set_by_user", path) or r.str(reason_d, "user", f"{path}.reason")) if reason else ""
    when = r.int(reason_d, "time", f"{path}.reason") if reason else None
    if reason and len(names) > 1 and base not in ("DOWN",) and not _OUT_FLAGS.intersection(flags):
        reason = user = ""  # in service (24.11 keeps a resumed node's reason): a stale reason, maybe another's
        when = None
    if reason and len(names) > 1:
        raise _fail(
            r.source,
            r.meta,
            f"{path} puts {len(names)} nodes ({','.join(names[:8])}"
            f"{',...' if len(names) > 8 else ''}) under one reason {reason!r}, which Slurm takes from the "
            "first node of the group only",
            "per-node reasons: capture `scontrol --json show node` or `scontrol show node` instead",
        )
    gres_d = r.obj(g, "gres", path)
    gres = r.str(gres_d, "total", f"{path}.gres")
    gres = "" if gres in ("(null)", "N/A") else gres
    used = r.str(gres_d, "used", f"{path}.gres")
    used = "" if used in ("(null)", "N/A") else used
    cpus_d = g.get("cpus")
    cpus = alloc = None
    if isinstance(cpus_d, dict):
        if len(names) == 1:
            cpus, alloc = r.int(cpus_d, "total", f"{path}.cpus"), r.int(cpus_d, "allocated", f"{path}.cpus")
        elif r.int(cpus_d, "minimum", f"{path}.cpus") == r.int(cpus_d, "maximum", f"{path}.cpus"):
            cpus = r.int(cpus_d, "maximum", f"{path}.cpus")
    elif cpus_d is not None:
        raise r.fail(f"{path}.cpus", "an object {allocated, idle, total, ...}", cpus_d)
    part = g.get("partition")
    if isinstance(part, dict):
        pname = r.str(part, "name", f"{path}.partition")
    elif isinstance(part, str) or part is None:
        pname = part or ""
    else:
        raise r.fail(f"{path}.partition", "an object with `name`", part)
    pname = pname.rstrip("*")
    return [
        NodeRecord(
            name=name,
            state=base,
            flags=list(flags),
            reason=reason,
            reason_user=user or None,
            reason_time=_epoch_iso(when),
            gres=gres,
            gres_used=used,
            gpus_total=gres_gpu_count(gres),
            gpus_used=gres_gpu_count(used),
            partitions=[pname] if pname else [],
            cpus=cpus,
            cpus_alloc=alloc,
        )
        for name in names
    ]


def _merge_partitions(recs: list[NodeRecord]) -> list[NodeRecord]:
    """A node listed once per partition (23.02+ groups) becomes one record with all its partitions."""
    out: dict[str, NodeRecord] = {}
    for rec in recs:
        old = out.get(rec.name)
        if old is None:
            out[rec.name] = rec
            continue
        old.partitions += [p for p in rec.partitions if p not in old.partitions]
        if old.cpus is None:
            old.cpus = rec.cpus
        if old.cpus_alloc is None:
            old.cpus_alloc = rec.cpus_alloc
    return list(out.values())


def parse_sinfo_json(text: str, source: str = "sinfo --json") -> list[NodeRecord]:
    """`sinfo --json` of any version slurmkit knows (see the module doc), one record per node."""
    data = load(text, source)
    r = _Reader(source, read_meta(data))
    _check_version(r, KNOWN, f"`sinfo --json` of {_EXPECTED}")
    if r.meta.parser in SINFO_PER_NODE:
        if "nodes" not in data:
            raise _fail(source, r.meta, "no top-level `nodes`", "`nodes`, one record per node (v0.0.37/38)")
        recs = [_node(r, n, f"nodes[{i}]") for i, n in enumerate(r.items(data, "nodes"))]
    else:
        if "sinfo" not in data:
            raise _fail(source, r.meta, "no top-level `sinfo`", "`sinfo`, groups of nodes (v0.0.39 and later)")
        recs = []
        for i, g in enumerate(r.items(data, "sinfo")):
            recs += _group(r, g, f"sinfo[{i}]")
        recs = _merge_partitions(recs)
    if not recs:
        raise _no_nodes(r, data, "nodes")
    return recs


# --- squeue --json -----------------------------------------------------------------------------------------------


def _job(r: _Reader, j: dict, path: str) -> JobRecord:
    job_id = r.int(j, "job_id", path)
    if job_id is None:
        raise r.fail(f"{path}.job_id", "a job id", j.get("job_id"))
    base, flags = _split_state(r, j.get("job_state") or "UNKNOWN", f"{path}.job_state")
    ec = j.get("exit_code")
    if isinstance(ec, dict):  # v0.0.39+: {status: [...], return_code: {set, number}, signal: {id: {...}}}
        rc = r.int(ec, "return_code", f"{path}.exit_code")
        sig = r.int(r.obj(ec, "signal", f"{path}.exit_code"), "id", f"{path}.exit_code.signal")
        exit_code = f"{rc or 0}:{sig or 0}"
    elif isinstance(ec, int) and not isinstance(ec, bool):
        exit_code = f"{ec}:0"
    elif ec is None:
        exit_code = ""
    else:
        raise r.fail(f"{path}.exit_code", "a number or an object", ec)
    return JobRecord(
        job_id=job_id,
        name=r.str(j, "name", path),
        state=base,
        reason=r.str(j, "state_reason", path),
        nodes=r.str(j, "nodes", path),
        user=r.str(j, "user_name", path),
        exit_code=exit_code,
        restarts=r.int(j, "restart_cnt", path) or 0,
        partition=r.str(j, "partition", path),
    )


def parse_squeue_json(text: str, source: str = "squeue --json") -> list[JobRecord]:
    """`squeue --json` of any version slurmkit knows: `jobs` (an empty queue is an empty list, unless Slurm
    reported errors)."""
    data = load(text, source)
    r = _Reader(source, read_meta(data))
    _check_version(r, KNOWN, f"`squeue --json` of {_EXPECTED}")
    if "jobs" not in data:
        raise _fail(source, r.meta, "no top-level `jobs`", "`jobs`, one record per job")
    jobs = [_job(r, j, f"jobs[{i}]") for i, j in enumerate(r.items(data, "jobs"))]
    errs = _errors(data)
    if not jobs and errs:
        raise _fail(source, r.meta, f"no jobs and Slurm's errors: {'; '.join(errs)}", "a job list")
    return jobs


def parse_nodes_json(text: str, source: str) -> tuple[str, list[NodeRecord]]:
    """A captured JSON node document of either command -> (kind, records): `sinfo` groups or per-node `nodes`
    (v0.0.37/38 sinfo, v0.0.39+ scontrol), told apart by the version and the top-level key."""
    data = load(text, source)
    meta = read_meta(data)
    if meta.parser in GROUPED and "nodes" in data and "sinfo" not in data:
        return "scontrol-json", parse_scontrol_nodes_json(text, source)
    if "jobs" in data and "nodes" not in data and "sinfo" not in data:
        raise _fail(
            source,
            meta,
            "this is `squeue --json` (jobs), not node output",
            "`sinfo --json` or `scontrol --json show node`",
        )
    return "sinfo-json", parse_sinfo_json(text, source)
