"""temperature: at or past a GPU's slowdown point fails, past its max operating point warns, in both layouts
nvidia-smi prints. Real captures: every fixture holding a Temperature section (all idle and healthy: A40s in
absolute degrees, H100s in T.Limit headroom). No capture shows a hot GPU: those cases are synthetic, made from a
real capture by changing one line, and named so."""

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.errors import UsageError
from slurmkit.health.checks import temperature

from checkcases import FIX, assert_verdict, holding, judge as judge_check
from sitesettings import make_settings

A40 = FIX / "misc" / "a40-x10-nvidia-smi-q-550-idle-p8-sw-power-cap-active-gpu0-gpu3-clocks-0mhz-dram-corr-10.txt"
H100 = FIX / "ecc" / "princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt"
# every fixture holding a GPU temperature -> (status, GPUs read)
EXPECTED = {
    A40: ("ok", 10),
    H100: ("ok", 1),
    FIX / "dcgm" / "h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt":
        ("ok", 8),
    FIX / "ecc" / "gpud-rtx4090-8gpu-q-535-first-gpu-ecc-disabled-na.txt": ("ok", 1),
    FIX / "ecc" / "h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt": ("ok", 1),
    FIX / "ecc" / "princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt": ("ok", 1),
}


def judge(text, s=None):
    return judge_check("temperature", text, s)


def test_every_capture_with_a_gpu_temperature_is_judged():
    assert holding("GPU Current Temp", "GPU T.Limit Temp") == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name[:50])
def test_fixture_verdict(path):
    assert_verdict("temperature", path, EXPECTED)


def _set(text: str, label: str, value: str, nth: int = 0) -> str:
    """SYNTHETIC: the capture with the nth `label : ...` line reading `value`."""
    lines, seen = text.splitlines(), 0
    for i, ln in enumerate(lines):
        if ln.strip().startswith(label + " ") and " : " in ln:
            if seen == nth:
                lines[i] = ln.split(" : ")[0] + " : " + value
                return "\n".join(lines) + "\n"
            seen += 1
    raise AssertionError(f"no {label} line #{nth}")


def test_synthetic_absolute_layout_slowdown_fails_and_max_operating_warns():
    r = judge(_set(A40.read_text(), "GPU Current Temp", "96 C", 2))          # slowdown 95 C on the A40
    assert r.status == "fail" and r.code == "temperature"
    assert r.reason == "GPU 0000:53:00: GPU at 96 C, its slowdown point is 95 C"
    r = judge(_set(A40.read_text(), "GPU Current Temp", "90 C", 2))          # max operating 88 C
    assert r.status == "warn" and r.reason == "GPU 0000:53:00: GPU at 90 C, over its max operating 88 C"


def test_synthetic_tlimit_layout_reads_headroom_not_degrees():
    # 54 C of headroom at idle is healthy; slowdown begins at -2 C of headroom, max operating at 0 C
    r = judge(_set(H100.read_text(), "GPU T.Limit Temp", "-3 C"))
    assert r.status == "fail" and r.reason.endswith("GPU -3 C from its limit, slowdown begins at -2 C")
    r = judge(_set(H100.read_text(), "GPU T.Limit Temp", "0 C"))
    assert r.status == "warn" and r.reason.endswith("GPU 0 C from its limit, past its max operating point")


def test_the_sites_limits_fail_and_are_validated_with_their_line():
    s = make_settings("temperature:\n  gpu_max_c: 30\n  memory_max_c: 40\n")
    r = judge(H100.read_text(), s)                                             # 33 C, memory 41 C
    assert r.status == "fail"
    assert r.reason == ("GPU 0000:19:00: GPU at 33 C, over temperature.gpu_max_c 30 C; "
                        "GPU 0000:19:00: memory at 41 C, over temperature.memory_max_c 40 C")
    with pytest.raises(UsageError) as e:
        make_settings("temperature:\n  gpu_max_c: 900\n")
    assert e.value.path == "site.yaml" and e.value.line == 2


def test_input_without_a_temperature_is_unreadable_not_ok():
    # the mock NVML's nvidia-smi 535 prints no Temperature section; an ECC excerpt holds none
    for path in (FIX / "local" / "nvml-mock-h100x8-nvidia-smi-535-q-gpu3-fallen-off-bus.txt",
                 FIX / "ecc" / "ml-eng-sram-uncorrectable-grep.txt"):
        with pytest.raises(UsageError, match="no GPU temperature"):
            judge(path.read_text())


_DEG = st.one_of(st.integers(-300, 300).map(lambda d: f"{d} C"), st.sampled_from(["N/A", "[N/A]", "", "C", "9" * 5000]))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["GPU Current Temp", "GPU Slowdown Temp", "GPU Max Operating Temp",
                                        "GPU T.Limit Temp", "GPU Slowdown T.Limit Temp",
                                        "GPU Max Operating T.Limit Temp", "Memory Current Temp"]), _DEG, min_size=1))
def test_any_temperature_section_gets_a_verdict_or_is_unreadable(fields):
    text = "GPU 00000000:18:00.0\n    Product Name : NVIDIA H100\n    Temperature\n" + "".join(
        f"        {k:<34}: {v}\n" for k, v in fields.items())
    try:
        r = temperature.evaluate(text, make_settings().temperature)
    except UsageError:
        assert not any(temperature._deg(fields.get(k)) is not None for k in ("GPU Current Temp", "GPU T.Limit Temp"))
        return
    cur = temperature._deg(fields.get("GPU Current Temp"))
    slow = temperature._deg(fields.get("GPU Slowdown Temp"))
    assert r.status in ("ok", "warn", "fail")
    if cur is not None and slow is not None and cur >= slow:
        assert r.status == "fail"
