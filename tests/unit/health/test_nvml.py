"""health/nvml.py's deadline: a read that does not answer is a finding (Hung, naming the call), never a wait; while
that worker stays stuck the process does not call again (Hung at once, still=True); a read already running for
another thread is waited for, not mistaken for a hang. The calls here are plain functions standing for a read
(the real hang on NVIDIA's mock library is tests/unit/health/test_nvml_source.py's)."""
from __future__ import annotations

import threading

import pytest

from slurmkit.health import nvml


def test_an_answer_comes_back_and_an_error_is_raised_in_the_caller():
    assert nvml.bounded(lambda: 42, 5) == 42
    with pytest.raises(nvml.Unavailable):
        nvml.bounded(lambda: (_ for _ in ()).throw(nvml.Unavailable("no driver")), 5)


def test_a_stuck_read_is_hung_then_still_hung_until_it_returns():
    release = threading.Event()
    try:
        with pytest.raises(nvml.Hung) as e:
            nvml.bounded(release.wait, 0.2, lambda: "nvmlDeviceGetHandleByIndex (GPU 3)")
        assert str(e.value) == "NVML nvmlDeviceGetHandleByIndex (GPU 3) did not answer in 0.2s" and not e.value.still
        with pytest.raises(nvml.Hung) as e:
            nvml.bounded(lambda: 1, 0.2)
        assert e.value.still and "a call before this run" in str(e.value)
    finally:
        release.set()
    for _ in range(100):  # the stuck worker ends; the next read works again
        try:
            assert nvml.bounded(lambda: 2, 5) == 2
            break
        except nvml.Hung:
            release.wait(0.05)
    else:
        raise AssertionError("the worker never let go")


def test_two_threads_reading_at_once_both_get_their_answer():
    gate = threading.Event()
    got = []

    def slow():
        gate.wait(5)
        return "first"

    t = threading.Thread(target=lambda: got.append(nvml.bounded(slow, 10)))
    t.start()
    while nvml._state["busy"] is None:
        gate.wait(0.01)
    threading.Timer(0.1, gate.set).start()
    got.append(nvml.bounded(lambda: "second", 10))
    t.join(10)
    assert sorted(got) == ["first", "second"]
