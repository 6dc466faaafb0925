import time

import pytest

from slurmkit import proc
from slurmkit.errors import CommandError


def test_runs_an_argv_and_captures_output():
    r = proc.run(["sh", "-c", "echo out; echo err >&2"], timeout=5)
    assert (r.returncode, r.stdout, r.stderr) == (0, "out\n", "err\n")


def test_feeds_stdin():
    assert proc.run(["cat"], timeout=5, input="hello").stdout == "hello"


def test_missing_binary_is_a_clear_error():
    with pytest.raises(CommandError) as e:
        proc.run(["no-such-tool-xyz", "-q"], timeout=5)
    assert e.value.missing
    assert str(e.value).startswith("no-such-tool-xyz: command not found")


def test_nonzero_exit_reports_the_last_stderr_line():
    with pytest.raises(CommandError) as e:
        proc.run(["sh", "-c", "echo first >&2; echo 'the real problem' >&2; exit 3"], timeout=5)
    assert e.value.returncode == 3 and str(e.value) == "sh: the real problem"
    assert proc.run(["sh", "-c", "exit 3"], timeout=5, check=False).returncode == 3


def test_a_hung_command_is_killed_within_its_timeout():
    start = time.monotonic()
    with pytest.raises(CommandError) as e:
        proc.run(["sleep", "60"], timeout=0.5)
    assert e.value.timed_out and "timed out after 0.5s" in str(e.value)
    assert time.monotonic() - start < 0.5 + proc.KILL_GRACE + 1


def test_grandchildren_holding_the_pipes_do_not_hang_the_caller():
    # the shell forks a sleeper that inherits stdout: killing only the shell would leave the pipe open
    start = time.monotonic()
    with pytest.raises(CommandError):
        proc.run(["sh", "-c", "sleep 60 & sleep 60"], timeout=0.5)
    assert time.monotonic() - start < 0.5 + proc.KILL_GRACE + 1


def test_no_path_falls_back_to_the_system_path():
    # Slurm starts prolog/epilog with no PATH at all
    r = proc.run(["sh", "-c", "echo $PATH"], timeout=5, env={})
    assert r.stdout.strip() == proc.DEFAULT_PATH


def test_a_string_command_is_refused():
    with pytest.raises(TypeError):
        proc.run("echo hi; rm -rf /", timeout=1)
