"""The context every click command gets (`@pass_ctx`). The type itself (slurmkit/context.py) is click-free so the
lean entry (slurmkit/entry.py) shares it; a command imports this module, not the CLI module that registers it."""

from __future__ import annotations

import click

from ..context import Ctx

pass_ctx = click.make_pass_decorator(Ctx)

__all__ = ["Ctx", "pass_ctx"]
