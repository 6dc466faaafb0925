"""slurmkit.duration: the one Slurm duration parser (the job spec's `time`, scontrol's RunTime/TimeLimit), and
slurmkit.signals / proc.pid_alive, the other helpers that were written twice."""
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, strategies as st

from slurmkit import proc, signals, times as duration
from slurmkit.jobs import spec as specmod
from slurmkit.run import parse_duration

small = st.integers(min_value=0, max_value=10**6)


@st.composite
def durations(draw):
    """(text as a user or Slurm writes it, its seconds), for each form of the --time grammar."""
    form = draw(st.sampled_from(["M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S"]))
    d, h, m, s = (draw(small) for _ in range(4))
    pad = draw(st.booleans())
    f = (lambda n: f"{n:02d}") if pad else str
    text, secs = {
        "M": (f(m), m * 60),
        "M:S": (f"{f(m)}:{f(s)}", m * 60 + s),
        "H:M:S": (f"{f(h)}:{f(m)}:{f(s)}", h * 3600 + m * 60 + s),
        "D-H": (f"{d}-{f(h)}", d * 86400 + h * 3600),
        "D-H:M": (f"{d}-{f(h)}:{f(m)}", d * 86400 + h * 3600 + m * 60),
        "D-H:M:S": (f"{d}-{f(h)}:{f(m)}:{f(s)}", d * 86400 + h * 3600 + m * 60 + s),
    }[form]
    return text, secs


@given(durations())
def test_every_form_of_the_grammar_parses_to_its_seconds(case):
    text, secs = case
    assert duration.seconds(text) == secs
    assert duration.duration_or_none(text) == secs
    assert duration.duration_or_none(f"  {text}\n") == secs     # scontrol's fields come with spaces
    # the job spec and the wrapper read durations the same way (one parser, not two)
    assert specmod.time_seconds(text) == secs and parse_duration(text) == secs


@given(st.text(max_size=20))
def test_text_that_is_not_a_duration_is_refused_never_guessed(text):
    grammar = duration.TIME_RE.fullmatch(text) is not None
    if grammar:
        assert duration.seconds(text) >= 0
    else:
        with pytest.raises(ValueError):
            duration.seconds(text)
    # what Slurm printed, padded or not: a duration exactly when its stripped text is one
    assert (duration.duration_or_none(text) is not None) == (duration.TIME_RE.fullmatch(text.strip()) is not None)


def test_slurm_forms_as_scontrol_prints_them():
    assert parse_duration("00:01:00") == 60
    assert parse_duration("1-02:03:04") == 86400 + 7384
    assert parse_duration("1-02") == 86400 + 2 * 3600     # days-hours (the old wrapper parser read 2 minutes)
    for none in ("UNLIMITED", "Partition_Limit", "INFINITE", "N/A", "", None, "x:y", "1:2:3:4", "-5"):
        assert duration.duration_or_none(none) is None
    with pytest.raises(ValueError):
        duration.seconds("1:2:3:4")


@pytest.mark.parametrize("text,num", [("USR2", signal.SIGUSR2), ("sigusr2", signal.SIGUSR2), (" TERM ", 15),
                                      ("12", 12), (10, 10)])
def test_signal_names_and_numbers(text, num):
    assert signals.signum(text) == num


def test_signal_names_back_and_unknown():
    assert signals.signame(int(signal.SIGUSR2)) == "SIGUSR2"
    assert signals.signame(250) == "250" and signals.signame(250, unknown="signal 250") == "signal 250"
    assert signals.is_name("usr1") and signals.is_name("SIGHUP")
    assert not signals.is_name("USR9") and not signals.is_name("12")
    with pytest.raises(KeyError):
        signals.signum("NOPE")


def test_pid_alive_running_exited_and_zombie():
    assert proc.pid_alive(os.getpid())
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    t0 = time.monotonic()
    while proc.pid_alive(p.pid) and time.monotonic() - t0 < 60:   # exited, not reaped: a zombie
        time.sleep(0.05)
    assert not proc.pid_alive(p.pid)
    p.wait()
    assert not proc.pid_alive(p.pid)
