"""The context every click command gets (`@pass_ctx`). The type itself (slurmkit/context.py) is click-free so the
lean entry (slurmkit/entry.py) shares it; a command imports this module, not the CLI module that registers it."""

from __future__ import annotations

import click

from ..context import Ctx

pass_ctx = click.make_pass_decorator(Ctx)


def echo(msg, err: bool = False) -> None:
    """The `echo` the click-free command cores (commands/*_core.py) print with, when click runs them."""
    click.echo(msg, err=err)


__all__ = ["Ctx", "echo", "pass_ctx"]
