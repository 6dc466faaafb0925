"""clocks: the hardware's own slowdowns fail, the reasons a GPU slows on purpose pass. Real captures: every
fixture that holds clock event reasons (A40s idle with SW Power Cap active at 0 MHz: not a fault; an old driver's
narrow labels and old section name; a CSV with legacy names and the bitmask). No capture shows a hardware slowdown
active (PROVENANCE.md's fourth-collection gaps): those cases are synthetic, made from a real capture by flipping
one line, and named so."""

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.errors import UsageError
from slurmkit.health.checks import clocks

from checkcases import FIX, assert_verdict, holding, judge as judge_check
from sitesettings import make_settings

A40 = FIX / "misc" / "a40-x10-nvidia-smi-q-550-idle-p8-sw-power-cap-active-gpu0-gpu3-clocks-0mhz-dram-corr-10.txt"
OLD = FIX / "misc" / "kubeflow-68-nvidia-smi-q-grep-A8-clocks-throttle-reasons-idle-active-old-narrow-labels.txt"
CSV = FIX / "ecc" / "rtxpro6000-bse-aws-clocks-event-reasons-csv.txt"
# every fixture holding clock event reasons -> (status, GPUs read)
EXPECTED = {
    A40: ("ok", 10),
    OLD: ("ok", 1),
    CSV: ("ok", 2),
    FIX / "dcgm" / "h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt":
        ("ok", 8),
    FIX / "ecc" / "princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt": ("ok", 1),
    FIX / "ecc" / "princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt": ("ok", 1),
    FIX / "ecc" / "h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt": ("ok", 1),
    FIX / "ecc" / "gpud-rtx4090-8gpu-q-535-first-gpu-ecc-disabled-na.txt": ("ok", 1),
    FIX / "local" / "nvml-mock-h100x8-nvidia-smi-535-q-gpu3-fallen-off-bus.txt": ("ok", 8),
}


def judge(text, s=None):
    return judge_check("clocks", text, s)


def test_every_capture_with_clock_reasons_is_judged():
    assert holding(
        "Clocks Event Reasons", "Clocks Throttle Reasons", "clocks_event_reasons.", "clocks_throttle_reasons.") == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name[:50])
def test_fixture_verdict(path):
    assert_verdict("clocks", path, EXPECTED)


def test_sw_power_cap_at_idle_is_read_and_is_not_a_fault():
    r = judge(A40.read_text())
    active = {g["gpu"]: g["active"] for g in r.evidence["gpus"]}
    assert active["0000:4f:00"] == ["sw_power_cap"] and active["0000:52:00"] == ["gpu_idle"], active


def _flip(text: str, label: str, nth: int = 0) -> str:
    """SYNTHETIC: the capture with the nth `label : Not Active` line made `Active`."""
    lines, seen = text.splitlines(), 0
    for i, ln in enumerate(lines):
        if ln.strip().startswith(label) and ln.rstrip().endswith(": Not Active"):
            if seen == nth:
                lines[i] = ln.replace(": Not Active", ": Active")
                return "\n".join(lines) + "\n"
            seen += 1
    raise AssertionError(f"no {label} line #{nth}")


def test_synthetic_hardware_slowdowns_fail_naming_the_gpu_and_reason():
    r = judge(_flip(_flip(A40.read_text(), "HW Slowdown", 2), "HW Thermal Slowdown", 2))
    assert r.status == "fail" and r.code == "clocks"
    assert r.reason == "GPU 0000:53:00: HW Slowdown, HW Thermal Slowdown active (the hardware holds the clocks down)"
    r = judge(_flip(OLD.read_text(), "HW Power Brake Slowdown"))     # the old narrow labels, nested
    assert r.status == "fail" and "HW Power Brake Slowdown active" in r.reason


def test_synthetic_sw_thermal_slowdown_warns_and_the_lists_are_config():
    text = _flip(A40.read_text(), "SW Thermal Slowdown")
    r = judge(text)
    assert r.status == "warn" and r.reason == "GPU 0000:4f:00: SW Thermal Slowdown active"
    s = make_settings("clocks:\n  fail_on: [sw_thermal_slowdown, sw_power_cap]\n  warn_on: []\n")
    r = judge(text, s)
    assert r.status == "fail" and "GPU 0000:4f:00: SW Power Cap, SW Thermal Slowdown active" in r.reason
    s = make_settings("clocks:\n  fail_on: []\n  warn_on: []\n")
    assert judge(_flip(A40.read_text(), "HW Slowdown"), s).status == "ok"


def test_a_reason_the_driver_does_not_have_is_a_config_error_with_its_line():
    with pytest.raises(UsageError) as e:
        make_settings("clocks:\n  fail_on: [hw_slowdown, hw_sloowdown]\n")
    assert e.value.path == "site.yaml" and e.value.line == 2 and "hw_sloowdown" in str(e.value)


def test_synthetic_csv_bitmask_alone_and_named_columns():
    # SYNTHETIC rows in the real CSV's shape: HW Slowdown (0x8) + HW Thermal (0x40) on GPU 1, idle on GPU 0
    text = "index, clocks_event_reasons.active\n0, 0x0000000000000001\n1, 0x0000000000000048\n"
    r = judge(text)
    assert r.status == "fail" and r.reason.startswith("GPU 1: HW Slowdown, HW Thermal Slowdown active")
    # a named column wins over the bitmask; [N/A] reads nothing
    text = ("index, clocks_event_reasons.active, clocks_event_reasons.hw_slowdown\n"
            "0, 0x0000000000000008, Not Active\n1, [N/A], [N/A]\n")
    assert judge(text).status == "ok"


def test_input_without_clock_reasons_is_unreadable_not_ok():
    for text in ((FIX / "ecc" / "ml-eng-h100-query-gpu-vbios.csv.txt").read_text(), "index, name\n0, H100\n"):
        with pytest.raises(UsageError, match="no clock event reasons"):
            judge(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 0x1FF), min_size=1, max_size=8))
def test_the_bitmask_fails_exactly_on_a_hardware_slowdown_bit(masks):
    text = "index, clocks_event_reasons.active\n" + "".join(f"{i}, 0x{m:016x}\n" for i, m in enumerate(masks))
    r = clocks.evaluate(text, make_settings().clocks)
    hw = [i for i, m in enumerate(masks) if m & (0x8 | 0x40 | 0x80)]
    sw = [i for i, m in enumerate(masks) if m & 0x20 and i not in hw]
    assert r.status == ("fail" if hw else "warn" if sw else "ok"), (masks, r.reason)
    assert [f"GPU {i}:" in r.reason for i in hw] == [True] * len(hw)
