"""How sbatch reads one `#SBATCH` line: a Python port of `_get_argument` in Slurm's src/sbatch/opt.c (22.05 to
26.05 read it the same way), for tests that check a rendered value reaches Slurm intact.

Rules: leading whitespace skipped; a backslash makes the next character literal, inside quotes too; ' or "
start a quoted run ended by the same quote; whitespace ends a word only outside quotes (and an escaped space still
ends it: the loop tests for whitespace before it looks at the escape); an unquoted # starts a comment; an unmatched
quote is fatal."""


class SbatchParseError(ValueError):
    pass


def _one(line: str, pos: int) -> tuple[str | None, int]:
    n = len(line)
    while pos < n and line[pos].isspace():
        pos += 1
    if pos >= n:
        return None, pos
    out = []
    escape = quoted = False
    q = ""
    while pos < n and (quoted or not line[pos].isspace()) and line[pos] != "\n":
        c = line[pos]
        if escape:
            escape = False
        elif c == "\\":
            escape = True
            pos += 1
            continue
        elif quoted:
            if c == q:
                quoted = False
                pos += 1
                continue
        elif c in "\"'":
            quoted, q = True, c
            pos += 1
            continue
        elif c == "#":
            return ("".join(out) if out else None), n
        out.append(c)
        pos += 1
    if quoted:
        raise SbatchParseError(f"Unmatched `{q}` in [{line}]")
    return "".join(out), pos


def sbatch_arguments(line: str) -> list[str]:
    """The arguments sbatch takes from the text after `#SBATCH`."""
    args = []
    pos = 0
    while True:
        a, pos = _one(line, pos)
        if a is None:
            return args
        args.append(a)
