"""Run the slurmkit CLI in process, as a user would see it: (exit code, stdout, stderr)."""
import contextlib
import io

from slurmkit import cli


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            return e.code, out.getvalue(), err.getvalue()
    return rc or 0, out.getvalue(), err.getvalue()
