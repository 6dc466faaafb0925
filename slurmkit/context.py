"""What a command runs with: the site config (loaded on first use), `-v` messages, the Slurm backend."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .settings import Settings


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Ctx:
    def __init__(self, config: str | None, verbose: int, echo: Callable[[str], None] | None = None):
        self.config_arg = config
        self.verbose = verbose
        self._settings: Settings | None = None
        self._echo = echo or _stderr

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from . import config

            self._settings = config.load(self.config_arg)
        return self._settings

    def say(self, msg: str) -> None:
        if self.verbose:
            self._echo(f"slurmkit: {msg}")

    def backend(self):
        from . import slurm

        return slurm.get_backend(self.settings, verbose=self.say if self.verbose else None)
