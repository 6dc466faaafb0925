"""Man pages from the CLI itself: one roff page per command (`slurmkit.1`, `slurmkit-install.1`, a group's
subcommands as `slurmkit-audit-resume.1`), from click's own usage, help and options, so a page cannot disagree
with `--help`. Written into man/ by dev/docs_gen.py (which also checks they are current); the wheel ships them as
<prefix>/share/man/man1 (pyproject's data-files), so `man slurmkit-install` works where MANPATH has the venv.
Deterministic: no date, only the version.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
MAN_DIR = REPO / "man"


def esc(text: str) -> str:
    """Text for roff: backslashes and hyphens escaped, a line starting with . or ' made literal."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + ln) if ln.startswith((".", "'")) else ln for ln in text.split("\n"))


def paragraphs(text: str) -> str:
    out = []
    for para in re.split(r"\n\s*\n", (text or "").strip()):
        if para.strip():
            out.append(esc(" ".join(para.split())))
    return "\n.PP\n".join(out)


def page(name: str, cmd: click.Command, ctx: click.Context, version: str) -> str:
    title = name.upper()
    short = cmd.get_short_help_str(limit=200).rstrip(".")
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines = [
        f'.TH {esc(title)} 1 "" "slurmkit {esc(version)}" "slurmkit manual"',
        ".SH NAME",
        f"{esc(name)} \\- {esc(short)}",
        ".SH SYNOPSIS",
        f".B {esc(ctx.command_path)}",
        esc(usage),
        ".SH DESCRIPTION",
        paragraphs(cmd.help or ""),
    ]
    opts = [p for p in cmd.get_params(ctx) if isinstance(p, click.Option) and not p.hidden]
    if opts:
        lines.append(".SH OPTIONS")
        for p in opts:
            rec = p.get_help_record(ctx)
            if rec is None:
                continue
            lines += [".TP", f".B {esc(rec[0])}", esc(" ".join(rec[1].split()))]
    if isinstance(cmd, click.Group):
        lines.append(".SH COMMANDS")
        for sub in cmd.list_commands(ctx):
            c = cmd.get_command(ctx, sub)
            if c is not None:
                lines += [".TP", f".B {esc(sub)}", esc(c.get_short_help_str(limit=200))]
    see = "slurmkit(1)" if name != "slurmkit" else "the slurmkit\\-COMMAND(1) pages"
    lines += [".SH SEE ALSO", f"{see}; the documentation pages in docs/ of the slurmkit source", ""]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """file name -> roff text, for the top command and every subcommand (recursively)."""
    sys.path.insert(0, str(REPO))
    from slurmkit import __version__
    from slurmkit.cli import cli

    out: dict[str, str] = {}

    def walk(cmd: click.Command, name: str, parent: click.Context | None, info: str) -> None:
        ctx = click.Context(cmd, info_name=info, parent=parent)
        out[f"{name}.1"] = page(name, cmd, ctx, __version__)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                c = cmd.get_command(ctx, sub)
                if c is not None:
                    walk(c, f"{name}-{sub}", ctx, sub)

    walk(cli, "slurmkit", None, "slurmkit")
    return out
