"""Errors a user can act on. The CLI turns them into one line on stderr and an exit code, never a traceback.

SlurmkitError        an operation failed (exit 1)
  UsageError         bad input or usage (exit 2), with .path and .line where there are some
    ParseError       input a parser cannot read (also a ValueError)
    SpecError        a job spec slurmkit will not submit
  CommandError       an external command could not run, timed out, or failed
  NoAnswer           could not find out: Slurm or a tool did not answer, or answered with nothing readable (exit 3,
                     the monitoring plugins' UNKNOWN), so a report never passes "could not ask" off as "unhealthy"
"""

from __future__ import annotations


class SlurmkitError(Exception):
    """An operation failed (exit 1)."""

    exit_code = 1


class UsageError(SlurmkitError):
    """Bad input: a config, a spec, a captured file or an argument we cannot use (exit 2).

    The message names the file, line and what was expected, where there is one.
    """

    exit_code = 2
    check: str | None = None  # the health check whose --capture input this is (health.runner sets it)

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.message = message  # without the `file:line: ` prefix
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class ParseError(UsageError, ValueError):
    """Input a parser cannot read (a capture, a Slurm document, a config): `.path` and `.line` say where, where
    known. A ValueError too, so a parser's callers that read several formats can try the next one."""


class SpecError(UsageError):
    """A job spec slurmkit will not submit (bad YAML, a wrong type, a value out of range, a request the cluster
    cannot hold): `.path` and `.line` say where (`line` is None for a `--set`/keyword override or a dict spec)."""


class NoAnswer(SlurmkitError):
    """Could not find out (exit 3): Slurm or a tool did not answer, or its answer could not be read. A command that
    reports state (audit, nodes) exits 3 then, never 1, which means "out of service" / "unhealthy"."""

    exit_code = 3


class CommandError(SlurmkitError):
    """An external command could not run, timed out, or failed."""

    def __init__(
        self,
        message: str,
        *,
        argv: list[str] | None = None,
        returncode: int | None = None,
        stdout: str = "",
        stderr: str = "",
        timed_out: bool = False,
        missing: bool = False,
    ):
        super().__init__(message)
        self.argv = argv or []
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        self.missing = missing


class RangeError(ValueError):
    """A numeric setting outside its valid range; `key` is the field's name (the loader adds its line)."""

    def __init__(self, key: str, detail: str):
        super().__init__(f"{key}: {detail}")
        self.key = key
        self.detail = detail
