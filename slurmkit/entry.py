"""The `slurmkit` console script (and `python -m slurmkit`): the common `submit`/`render` command lines run
without importing click (its import is a good part of a submit's start-up); every other command line, and any
option the fast path does not know (-h, -v, a typo), goes to the click CLI (slurmkit/cli.py), which has the help,
the usage errors and the other commands. Both run the same code (commands/submit_core.py); tests compare them.
A command line seen before with the same files runs from the submission cache (slurmkit/jobs/submitcache.py).

Fast path: `slurmkit [--config FILE] submit [--set K=V]... [--dry-run] [--json] [--no-check] [--] JOB.yaml` and
`slurmkit [--config FILE] render [--set K=V]... [--] JOB.yaml`.
"""

from __future__ import annotations

import re
import sys

FLAGS = {"submit": ("--dry-run", "--json", "--no-check"), "render": ()}
_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")  # click.echo strips these where the stream is not a terminal


def parse_fast(argv: list[str]) -> tuple[str, str | None, str, list[str], set[str]] | None:
    """(command, config, spec path, --set items, flags) for a command line the fast path runs; None for any
    other (click then parses it, with its help and its errors)."""
    config, i = None, 0
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a == "--config" and i + 1 < len(argv):
            config, i = argv[i + 1], i + 2
        elif a.startswith("--config="):
            config, i = a[len("--config=") :], i + 1
        else:
            return None
    if i >= len(argv) or argv[i] not in FLAGS:
        return None
    cmd, i = argv[i], i + 1
    sets: list[str] = []
    flags: set[str] = set()
    pos: list[str] = []
    only_pos = False
    while i < len(argv):
        a = argv[i]
        if only_pos or a == "-" or not a.startswith("-"):
            pos.append(a)
        elif a == "--":
            only_pos = True
        elif a == "--set" and i + 1 < len(argv):
            sets.append(argv[i + 1])
            i += 1
        elif a.startswith("--set="):
            sets.append(a[len("--set=") :])
        elif a in FLAGS[cmd]:
            flags.add(a)
        else:
            return None
        i += 1
    if len(pos) != 1:
        return None
    return cmd, config, pos[0], sets, flags


def _echo(msg, err: bool = False) -> None:
    """click.echo's output for one message: a line, ANSI escapes stripped where the stream is not a terminal."""
    stream = sys.stderr if err else sys.stdout
    text = str(msg)
    if not stream.isatty():
        text = _ANSI.sub("", text)
    stream.write(text + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    fast = parse_fast(args)
    if fast is None:
        from .cli import main as cli_main

        cli_main(args)
        return
    cmd, config, spec_path, sets, flags = fast
    from .context import Ctx
    from .errors import SlurmkitError

    ctx = Ctx(config, 0)
    opts = {"dry_run": "--dry-run" in flags, "as_json": "--json" in flags, "no_check": "--no-check" in flags}
    try:
        from .commands import submit_core
        from .jobs import submitcache

        store = submitcache.key_for(config, spec_path, sets)
        if submit_core.from_cache(store, cmd, spec_path, echo=_echo, **(opts if cmd == "submit" else {})):
            pass
        elif cmd == "render":
            submit_core.render_main(ctx, spec_path, tuple(sets), store=store)
        else:
            submit_core.submit_main(ctx, spec_path, tuple(sets), echo=_echo, store=store, **opts)
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
    sys.exit(0)
