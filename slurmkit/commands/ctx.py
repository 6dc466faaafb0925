"""The context every command gets (`@pass_ctx`): the --config/-v options, the site settings loaded on first use,
and the Slurm backend. Its own module so a command imports this, not the CLI module that registers it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..settings import Settings


class Ctx:
    def __init__(self, config: str | None, verbose: int):
        self.config_arg = config
        self.verbose = verbose
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from .. import config
            self._settings = config.load(self.config_arg)
        return self._settings

    def say(self, msg: str) -> None:
        if self.verbose:
            click.echo(f"slurmkit: {msg}", err=True)

    def backend(self):
        from .. import slurm
        return slurm.get_backend(self.settings, verbose=self.say if self.verbose else None)


pass_ctx = click.make_pass_decorator(Ctx)
