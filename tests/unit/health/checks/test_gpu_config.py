"""gpu_config: persistence mode and application clocks as the site wants them. Real captures: every nvidia-smi -q
fixture holding either (all persistence Enabled, application clocks at their defaults; the mock NVML's 535 -q
prints the clocks only). No capture shows persistence off or clocks left set: those cases are synthetic, made from
a real capture by changing one line, and named so."""

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.errors import UsageError
from slurmkit.health.checks import gpu_config

from checkcases import FIX, assert_verdict, holding, judge as judge_check
from sitesettings import make_settings

H100 = FIX / "dcgm" / "h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt"
# every -q fixture holding persistence mode or application clocks -> (status, GPUs read)
EXPECTED = {
    H100: ("ok", 8),
    FIX / "misc" / "a40-x10-nvidia-smi-q-550-idle-p8-sw-power-cap-active-gpu0-gpu3-clocks-0mhz-dram-corr-10.txt":
        ("ok", 10),
    FIX / "ecc" / "princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt": ("ok", 1),
    FIX / "ecc" / "princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt": ("ok", 1),
    FIX / "ecc" / "h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt": ("ok", 1),
    FIX / "ecc" / "gpud-rtx4090-8gpu-q-535-first-gpu-ecc-disabled-na.txt": ("ok", 1),
    FIX / "local" / "nvml-mock-h100x8-nvidia-smi-535-q-gpu3-fallen-off-bus.txt": ("ok", 8),
}


def judge(text, s=None):
    return judge_check("gpu_config", text, s)


def test_every_q_capture_with_persistence_or_app_clocks_is_judged():
    assert holding("    Persistence Mode   ", "    Applications Clocks\n") == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name[:50])
def test_fixture_verdict(path):
    assert_verdict("gpu_config", path, EXPECTED)


def _set(text: str, section: str | None, label: str, value: str, nth: int = 0) -> str:
    """SYNTHETIC: the capture with the nth `label` line (inside `section`, when given) reading `value`."""
    lines, seen, inside = text.splitlines(), 0, section is None
    for i, ln in enumerate(lines):
        if section is not None and ln.startswith("    ") and not ln.startswith("     "):
            inside = ln.strip() == section
        if inside and ln.strip().startswith(label + " ") and " : " in ln:
            if seen == nth:
                lines[i] = ln.split(" : ")[0] + " : " + value
                return "\n".join(lines) + "\n"
            seen += 1
    raise AssertionError(f"no {label} line #{nth}")


def test_synthetic_persistence_off_warns_and_the_site_may_fail_it_or_want_it_off():
    text = _set(H100.read_text(), None, "Persistence Mode", "Disabled", 2)
    r = judge(text)
    assert r.status == "warn" and r.code == "gpu_config"
    assert r.reason == "GPU 0000:3a:00: persistence mode disabled, the site wants it enabled"
    assert judge(text, make_settings("gpu_config:\n  status: fail\n")).status == "fail"
    r = judge(H100.read_text(), make_settings("gpu_config:\n  persistence: disabled\n"))
    assert r.status == "warn" and r.reason.count("persistence mode enabled, the site wants it disabled") == 8
    assert judge(text, make_settings("gpu_config:\n  persistence: any\n")).status == "ok"


def test_synthetic_application_clocks_left_set_warn_and_pins_win():
    text = _set(H100.read_text(), "Applications Clocks", "Graphics", "1410 MHz", 5)    # someone's `nvidia-smi -ac`
    r = judge(text)
    assert r.status == "warn"
    assert r.reason == ("GPU 0000:ab:00: application graphics clock 1410 MHz, its default is 1980 MHz "
                        "(left by `nvidia-smi -ac`?)")
    assert judge(text, make_settings("gpu_config:\n  app_clocks: any\n")).status == "ok"
    pinned = make_settings("gpu_config:\n  app_graphics_mhz: 1410\n")
    r = judge(text, pinned)                       # the site runs 1410 MHz: the other seven GPUs are the odd ones
    assert r.status == "warn" and r.reason.count("application graphics clock 1980 MHz, the site pins 1410 MHz") == 7
    with pytest.raises(UsageError) as e:
        make_settings("gpu_config:\n  app_memory_mhz: 0\n")
    assert e.value.path == "site.yaml" and e.value.line == 2


def test_input_without_either_is_unreadable_not_ok():
    for path in (FIX / "ecc" / "ml-eng-sram-uncorrectable-grep.txt", FIX / "dcgm" / "v100-pcie-dcgmi-diag-r1-pass.txt"):
        with pytest.raises(UsageError, match="no persistence mode or application clocks"):
            judge(path.read_text())


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["Enabled", "Disabled", "N/A", "[Not Supported]", "x"]),
       st.sampled_from(["1980 MHz", "1410 MHz", "N/A", "9" * 5000 + " MHz", ""]),
       st.sampled_from(["1980 MHz", "N/A"]))
def test_any_section_gets_a_verdict(pm, app, dflt):
    text = (f"GPU 00000000:18:00.0\n    Product Name : NVIDIA H100\n    Persistence Mode : {pm}\n"
            f"    Applications Clocks\n        Graphics : {app}\n    Default Applications Clocks\n"
            f"        Graphics : {dflt}\n")
    try:
        r = gpu_config.evaluate(text, make_settings().gpu_config)
    except UsageError:
        assert pm not in ("Enabled", "Disabled")
        return
    # a clock of 5,000 digits reads as huge: not the default either
    bad = pm == "Disabled" or (app not in ("N/A", "", "1980 MHz") and dflt == "1980 MHz")
    assert r.status == ("warn" if bad else "ok"), (pm, app, dflt, r.reason)
