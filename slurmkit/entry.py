"""The `slurmkit` console script (and `python -m slurmkit`): the common command lines of `submit`, `render`,
`sync`, `nodes` and `audit` run without importing click (its import is a good part of their start-up); every
other command line, and any option the fast path does not know (-h, -v, a typo, a value it would have to
convert the way click does), goes to the click CLI (slurmkit/cli.py), which has the help, the usage errors and
the other commands. Both run the same code (commands/*_core.py); tests compare them byte for byte. A submit or
render seen before with the same files runs from the submission cache (slurmkit/jobs/submitcache.py).

Fast path (options in any order after the command, `--opt=value` or `--opt value`, `--` ends the options):
  slurmkit [--config FILE] submit [--set K=V]... [--dry-run] [--json] [--no-check] JOB.yaml
  slurmkit [--config FILE] render [--set K=V]... JOB.yaml
  slurmkit [--config FILE] sync [--keep N] [--user U] [--marker F] [--series J] [--dry-run] [--json] SOURCE DEST
  slurmkit [--config FILE] nodes [--json] [NODELIST]
  slurmkit [--config FILE] audit [--json | --csv] [--partition P] [--since AGE] [--from-file F] [--now T]
"""

from __future__ import annotations

import re
import sys

# command -> (flags, options that take a value (those marked * may repeat), positional arguments (min, max))
COMMANDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[int, int]]] = {
    "submit": (("--dry-run", "--json", "--no-check"), ("--set*",), (1, 1)),
    "render": ((), ("--set*",), (1, 1)),
    "sync": (("--dry-run", "--json"), ("--keep", "--user", "--marker", "--series"), (2, 2)),
    "nodes": (("--json",), (), (0, 1)),
    "audit": (("--json", "--csv"), ("--partition", "-p", "--since", "--from-file", "--now"), (0, 0)),
}
_ALIASES = {"-p": "--partition"}
_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")  # click.echo strips these where the stream is not a terminal

Line = tuple[str, "str | None", list[str], dict[str, list[str]], set[str]]


def parse_fast(argv: list[str]) -> Line | None:
    """(command, config, positional arguments, {option: [values]}, flags) for a command line the fast path runs;
    None for any other (click then parses it, with its help and its errors)."""
    config, i = None, 0
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a == "--config" and i + 1 < len(argv) and config is None:
            config, i = argv[i + 1], i + 2
        elif a.startswith("--config=") and config is None:
            config, i = a[len("--config=") :], i + 1
        else:
            return None
    if i >= len(argv) or argv[i] not in COMMANDS:
        return None
    cmd, i = argv[i], i + 1
    flag_names, value_names, (lo, hi) = COMMANDS[cmd]
    values = {v.rstrip("*"): v.endswith("*") for v in value_names}  # name -> may repeat
    opts: dict[str, list[str]] = {}
    flags: set[str] = set()
    pos: list[str] = []
    only_pos = False
    while i < len(argv):
        a = argv[i]
        name, _, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        if only_pos or a == "-" or not a.startswith("-"):
            pos.append(a)
        elif a == "--":
            only_pos = True
        elif name in values and (a != name or i + 1 < len(argv)):
            if a == name:
                inline, i = argv[i + 1], i + 1
            key = _ALIASES.get(name, name)
            if key in opts and not values[name]:
                return None  # a repeated single option: click's rule (the last wins) is left to click
            opts.setdefault(key, []).append(inline)
        elif a in flag_names:
            flags.add(a)
        else:
            return None
        i += 1
    if not lo <= len(pos) <= hi:
        return None
    keep = opts.get("--keep")
    if keep and not (keep[0].isdigit() and keep[0].isascii() and int(keep[0]) >= 1):
        return None  # click converts (and refuses) anything else
    return cmd, config, pos, opts, flags


def _echo(msg, err: bool = False) -> None:
    """click.echo's output for one message: a line, ANSI escapes stripped where the stream is not a terminal."""
    stream = sys.stderr if err else sys.stdout
    text = str(msg)
    if not stream.isatty():
        text = _ANSI.sub("", text)
    stream.write(text + "\n")
    stream.flush()


def _run(line: Line) -> int:
    from .context import Ctx

    cmd, config, pos, opts, flags = line
    one = {k: v[-1] for k, v in opts.items()}
    ctx = Ctx(config, 0)
    if cmd in ("submit", "render"):
        from .commands import submit_core
        from .jobs import submitcache

        sets = opts.get("--set", [])
        kw = {"dry_run": "--dry-run" in flags, "as_json": "--json" in flags, "no_check": "--no-check" in flags}
        store = submitcache.key_for(config, pos[0], sets)
        if submit_core.from_cache(store, cmd, pos[0], echo=_echo, **(kw if cmd == "submit" else {})):
            pass
        elif cmd == "render":
            submit_core.render_main(ctx, pos[0], tuple(sets), store=store)
        else:
            submit_core.submit_main(ctx, pos[0], tuple(sets), echo=_echo, store=store, **kw)
        return 0
    if cmd == "sync":
        from .commands.sync_core import sync_main

        return sync_main(
            ctx,
            pos[0],
            pos[1],
            keep=int(one["--keep"]) if "--keep" in one else None,
            as_user=one.get("--user"),
            marker=one.get("--marker"),
            series=one.get("--series"),
            dry_run="--dry-run" in flags,
            as_json="--json" in flags,
            echo=_echo,
        )
    if cmd == "nodes":
        from .commands.nodes_core import nodes_main

        return nodes_main(ctx, pos[0] if pos else None, as_json="--json" in flags, echo=_echo)
    from .commands.audit_core import audit_main

    return audit_main(
        ctx,
        as_json="--json" in flags,
        as_csv="--csv" in flags,
        partition=one.get("--partition"),
        since=one.get("--since"),
        from_file=one.get("--from-file"),
        now_text=one.get("--now"),
        echo=_echo,
    )


def _needs_click(line: Line) -> bool:
    """A command line whose output only click makes: sync's progress bar (stderr a terminal)."""
    cmd, _, _, opts, flags = line
    user = opts.get("--user", [""])[-1]
    return cmd == "sync" and not ({"--json", "--dry-run"} & flags) and not user and sys.stderr.isatty()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    line = parse_fast(args)
    if line is None or _needs_click(line):
        from .cli import main as cli_main

        cli_main(args)
        return
    from .errors import SlurmkitError
    from .lazymod import defer

    # loaded on first use (slurmkit/lazymod.py): inspect, for dataclasses' one use of it (a docstring) and Jinja2's
    # `attr` filter (getattr_static); tempfile, for the write of a newly compiled template to Jinja2's bytecode
    # cache. ~15 ms of every fast path, and ~15% of Jinja2's import for a new spec's submit
    defer("inspect", calls=("getattr_static",))
    defer("tempfile")
    try:
        rc = _run(line)
        sys.stdout.flush()
    except SlurmkitError as e:
        _echo(f"slurmkit: error: {e}", err=True)
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, EOFError):  # as click: a blank line (closes the terminal's ^C), then "aborted"
        _echo("", err=True)
        _echo("aborted", err=True)
        sys.exit(130)
    except BrokenPipeError:  # as click: exit 1, and no second error when Python flushes the closed pipe
        import os

        sys.stdout = open(os.devnull, "w")
        sys.exit(1)
    sys.exit(rc)
