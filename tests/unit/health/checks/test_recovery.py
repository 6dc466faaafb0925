"""The recovery check: the driver's gpu_recovery_action, on the real capture of a GPU that needed a reset while
DCGM's health watches said Healthy (DCGM #263), and on synthetic `nvidia-smi -q` excerpts (named so)."""
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.health.checks import recovery
from slurmkit.health.context import NoData

FIX = Path(__file__).resolve().parents[3] / "fixtures"


def test_the_real_reset_capture_fails_naming_the_gpu_and_the_action():
    text = (FIX / "gpuutil" / "8gpu-query-gpu-index-gpu-recovery-action-noheader-reset-annotated-dcgm-263.txt"
            ).read_text()
    r = recovery.evaluate(text)
    assert r.status == "fail" and r.reason == "GPU 1 needs a GPU reset (gpu_recovery_action=Reset)"
    assert r.code == "recovery" and r.evidence["gpus"]["0"] == "None"


Q = """==============NVSMI LOG==============

GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    GPU Recovery Action                   : {a}

GPU 00000000:2A:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    GPU Recovery Action                   : {b}
"""


@pytest.mark.parametrize("a,b,status,words", [
    ("None", "None", "ok", "2 GPUs: no recovery action pending"),
    ("None", "Reboot", "fail", "GPU 00000000:2A:00.0 needs a node reboot"),
    ("Drain and Reset", "Reset", "fail", "also GPU 00000000:2A:00.0"),
    ("[N/A]", "[N/A]", "skip", "does not report"),
    ("None", "Self Destruct", "warn", "unknown gpu_recovery_action"),
])
def test_synthetic_q_excerpts(a, b, status, words):
    r = recovery.evaluate(Q.format(a=a, b=b))
    assert r.status == status and words in r.reason


def test_a_header_line_is_fine_and_input_without_the_field_is_unreadable():
    assert recovery.evaluate("index, gpu_recovery_action\n0, None\n").status == "ok"
    for text in ("", "GPU 00000000:18:00.0\n    Product Name : X\n", "garbage\n"):
        with pytest.raises(NoData):
            recovery.evaluate(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_property_never_a_traceback_and_never_ok_without_a_reading(text):
    try:
        r = recovery.evaluate(text)
    except NoData:
        return
    assert r.status in ("ok", "warn", "fail", "skip")
    if r.status == "ok":
        assert any(a.strip().lower() == "none" for a in r.evidence["gpus"].values())
