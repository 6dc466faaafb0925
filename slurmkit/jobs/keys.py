"""The grammar of the spec keys that become plain sbatch options (issue 30): dependency, typed GPUs, constraint,
node lists, mail. Pure functions over text; each raises ValueError with a message that says what it got, which the
spec check turns into a `file:line: key: ...` error. What passes here is safe on an `#SBATCH` line and means one
thing to Slurm (no quotes, spaces or shell characters in any of them; comment is free text, quoted by the render).
"""

from __future__ import annotations

import re

# Slurm's dependency types (sbatch(1) --dependency); `singleton` takes no job ids
DEPENDENCY_TYPES = ("after", "afterany", "afterburstbuffer", "aftercorr", "afternotok", "afterok")
# sbatch(1) --mail-type
MAIL_TYPES = (
    "NONE",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "ALL",
    "INVALID_DEPEND",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
)
_JOB_ID = re.compile(r"\A[0-9]{1,10}(?:_[0-9]{1,7})?\Z")  # 123, or 123_4 (one array task)
_AFTER_TIME = re.compile(r"\A[0-9]{1,10}(?:_[0-9]{1,7})?\+[0-9]{1,6}\Z")  # after:123+10 (minutes after it started)
# a GPU type as gres.conf names it: h100, a100_80gb, MIG profiles 1g.10gb, nvidia_a100_3g.39gb
GPU_TYPE_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# a node feature: letters, digits, _ . - (sbatch(1) --constraint); the operators between them are parsed below
_CONSTRAINT_TOKEN = re.compile(r"[A-Za-z0-9_.-]+(?:\*[0-9]{1,6})?|[&|,\[\]()]")
# a host list expression (n1, n[1-4], gpu-[01-08,10]); expanded with slurmkit.hostlist
_HOSTLIST_RE = re.compile(r"\A[A-Za-z0-9_.\-\[\],]{1,4096}\Z")
# a mail address or a user name
_MAIL_USER_RE = re.compile(r"\A[A-Za-z0-9._%+-]{1,128}(?:@[A-Za-z0-9.-]{1,253})?\Z")


def dependency_text(value: str | list[str]) -> str:
    """The `--dependency=` value: a Slurm expression as written ("afterok:123:124", "afterany:5,afterok:6",
    "singleton"), or a list whose items are job ids (afterok) or such expressions, joined with `,` (all of them).
    Bare ids in a row become one `afterok:` item: [123, 124, "afterany:9"] -> "afterok:123:124,afterany:9"."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("is empty (a job id, a list of ids, or a Slurm expression like afterok:123:124)")
        if _JOB_ID.fullmatch(text):
            return f"afterok:{text}"
        _check_expression(text)
        return text
    if not value:
        raise ValueError("is an empty list (give job ids, or leave dependency out)")
    out: list[str] = []
    ids: list[str] = []
    for item in value:
        item = item.strip()
        if _JOB_ID.fullmatch(item):
            ids.append(item)
            continue
        if ids:
            out.append("afterok:" + ":".join(ids))
            ids = []
        if "?" in item:
            raise ValueError(f"{item!r}: `?` (any of) cannot be mixed with a list (which means all of)")
        _check_expression(item)
        out.append(item)
    if ids:
        out.append("afterok:" + ":".join(ids))
    return ",".join(out)


def _check_expression(text: str) -> None:
    seps = {c for c in text if c in ",?"}
    if len(seps) > 1:
        raise ValueError(f"{text!r}: mixes `,` (all of) and `?` (any of); Slurm takes one of them")
    for part in re.split(r"[,?]", text):
        kind, colon, rest = part.partition(":")
        if kind == "singleton" and not colon:
            continue
        if kind not in DEPENDENCY_TYPES:
            import difflib  # only for a hint on an error

            hint = difflib.get_close_matches(kind, [*DEPENDENCY_TYPES, "singleton"], n=1)
            raise ValueError(
                f"{part!r}: unknown dependency type {kind!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else f" (one of {', '.join(DEPENDENCY_TYPES)}, singleton)")
            )
        if not colon or not rest:
            raise ValueError(f"{part!r}: expected {kind}:JOBID[:JOBID...]")
        for jid in rest.split(":"):
            if not (_JOB_ID.fullmatch(jid) or (kind == "after" and _AFTER_TIME.fullmatch(jid))):
                raise ValueError(f"{part!r}: {jid!r} is not a job id (123, or 123_4 for one array task)")


def check_gpu_type(value: str) -> str:
    if not GPU_TYPE_RE.fullmatch(value):
        raise ValueError(
            f"expected a GPU type as the nodes' Gres names it (h100, a100_80gb, a MIG profile like 1g.10gb), "
            f"got {value!r}"
        )
    return value


def check_constraint(value: str) -> str:
    """A node feature expression: features joined by & | , with [ ] ( ) and `*N` counts; nothing else."""
    pos = 0
    depth = 0
    prev = ""
    if not value:
        raise ValueError("is empty")
    for m in _CONSTRAINT_TOKEN.finditer(value):
        if m.start() != pos:
            break
        tok = m.group()
        pos = m.end()
        if tok in "([":
            depth += 1
        elif tok in ")]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{value!r}: unbalanced {tok!r}")
        elif tok in "&|,":
            if prev in ("", "&", "|", ",", "(", "["):
                raise ValueError(f"{value!r}: {tok!r} needs a feature on each side")
        prev = tok
    if pos != len(value):
        raise ValueError(
            f"{value!r}: {value[pos]!r} at character {pos + 1} is not part of a node feature expression "
            "(features of letters, digits, _ . - joined by & | , with [ ] ( ) and *N)"
        )
    if depth:
        raise ValueError(f"{value!r}: unbalanced brackets")
    if prev in ("&", "|", ","):
        raise ValueError(f"{value!r}: ends with {prev!r}")
    return value


def check_hosts(items: list[str], *, limit: int = 10_000) -> list[str]:
    """Each item a host list expression; returns every host named (sorted, once each)."""
    from ..hostlist import HostlistError, expand

    hosts: set[str] = set()
    for item in items:
        if not _HOSTLIST_RE.fullmatch(item):
            raise ValueError(f"{item!r} is not a host list (n1, n[1-4], gpu-[01-08]: letters, digits, _ . - [ ] ,)")
        try:
            hosts.update(expand(item, limit=limit))
        except HostlistError as e:
            raise ValueError(getattr(e, "message", str(e))) from None
    return sorted(hosts)


def check_mail_user(value: str) -> str:
    if not _MAIL_USER_RE.fullmatch(value):
        raise ValueError(f"expected a mail address or a user name, got {value!r}")
    return value


def mail_types(value: list[str] | str) -> list[str]:
    """`END,FAIL`, `[END, FAIL]` or `end` -> ['END', 'FAIL'], checked against sbatch's --mail-type words."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        word = item.strip().upper()
        if word not in MAIL_TYPES:
            import difflib  # only for a hint on an error

            hint = difflib.get_close_matches(word, MAIL_TYPES, n=1)
            raise ValueError(
                f"unknown mail type {item!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else f" (one of {', '.join(MAIL_TYPES)})")
            )
        if word not in out:
            out.append(word)
    if not out:
        raise ValueError(f"needs at least one of {', '.join(MAIL_TYPES)}")
    if "NONE" in out and len(out) > 1:
        raise ValueError("NONE with other mail types")
    return out


def as_list(value: list[str] | str | None) -> list[str]:
    """A key that takes one string or a list of them, as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
