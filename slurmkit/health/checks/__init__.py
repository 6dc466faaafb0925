"""One module per check. Each has NAME, a pure `evaluate(...)` over parsed text and settings, and `run(ctx)`,
which fetches its input through the Context (a captured file or a command with a timeout) and calls evaluate."""

from .registry import ORDER

__all__ = ["ORDER"]
