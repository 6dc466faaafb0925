"""sbatch and the cluster check, with Slurm's failures said as their cause (shared by `slurmkit submit` and
slurmkit.submit()): `sbatch: Batch job submission failed: Invalid partition name specified`, not
`sbatch: sbatch: error: ...`; a munge that cannot be reached as such (exit 3), not as `sinfo --json`'s
"Unspecified error"."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CommandError, SlurmkitError
from ..slurm.diagnose import auth_problem, client_error
from .handle import Slurm, SlurmUnavailable


def _command_error(e: BaseException) -> CommandError | None:
    while e is not None:
        if isinstance(e, CommandError):
            return e
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return None


def sbatch(backend, script: str, slurm: Slurm) -> int:
    """backend.submit(script), its failure said as sbatch's cause."""
    try:
        return backend.submit(script)
    except SlurmkitError as e:
        ce = _command_error(e)
        if ce is None or ce.timed_out or ce.missing:
            raise
        msg = client_error("sbatch", ce.stderr, ce.stdout, ce.returncode)
        if auth_problem(ce.stderr):
            raise SlurmUnavailable(msg) from None
        raise SlurmkitError(msg) from None


@contextmanager
def slurm_said(slurm: Slurm) -> Iterator[None]:
    """Around the cluster check: a Slurm failure that does not say why (pyslurm's error; `sinfo --json` exits 0
    with only "Unspecified error" when munge refuses) is explained by one `sinfo` whose stderr names the cause."""
    try:
        yield
    except SlurmkitError as e:
        if e.exit_code == 2 or isinstance(e, SlurmUnavailable):
            raise
        ce = _command_error(e)
        if ce is not None and auth_problem(ce.stderr):
            raise SlurmUnavailable(client_error(ce.argv[0] if ce.argv else "sinfo", ce.stderr)) from None
        try:
            res = slurm.run(["sinfo", "-h", "-o", "%P"])
        except SlurmUnavailable as probe:  # the cause, not the check's "no nodes ... Unspecified error"
            raise SlurmUnavailable(str(probe)) from None
        except SlurmkitError:
            raise e from None
        del res
        raise
