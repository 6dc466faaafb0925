"""vbios: one VBIOS per GPU model on a node (gcm's vbios_mismatch), and the versions a site pins. Real captures:
every fixture holding VBIOS versions (each node one version; the 8x H100 CSV with its middle rows elided). No
capture shows a node with two versions: those cases are synthetic, made from a real capture by changing one line,
and named so."""

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.errors import UsageError
from slurmkit.health.checks import vbios

from checkcases import FIX, assert_verdict, holding, judge as judge_check
from sitesettings import make_settings

H100 = FIX / "dcgm" / "h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt"
CSV = FIX / "ecc" / "ml-eng-h100-query-gpu-vbios.csv.txt"
# every fixture holding VBIOS versions -> (status, GPUs read)
EXPECTED = {
    H100: ("ok", 8),
    CSV: ("ok", 2),
    FIX / "misc" / "a40-x10-nvidia-smi-q-550-idle-p8-sw-power-cap-active-gpu0-gpu3-clocks-0mhz-dram-corr-10.txt":
        ("ok", 10),
    FIX / "ecc" / "princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt": ("ok", 1),
    FIX / "ecc" / "princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt": ("ok", 1),
    FIX / "ecc" / "h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt": ("ok", 1),
    FIX / "ecc" / "gpud-rtx4090-8gpu-q-535-first-gpu-ecc-disabled-na.txt": ("ok", 1),
}


def judge(text, s=None):
    return judge_check("vbios", text, s)


def test_every_capture_with_vbios_versions_is_judged():
    assert holding("VBIOS Version", "vbios_version") == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name[:50])
def test_fixture_verdict(path):
    assert_verdict("vbios", path, EXPECTED)


def _odd(text: str, nth: int, version: str) -> str:
    """SYNTHETIC: the capture with its nth `VBIOS Version` line reading `version`."""
    lines, seen = text.splitlines(), 0
    for i, ln in enumerate(lines):
        if ln.strip().startswith("VBIOS Version"):
            if seen == nth:
                lines[i] = ln.split(" : ")[0] + " : " + version
                return "\n".join(lines) + "\n"
            seen += 1
    raise AssertionError(f"no VBIOS line #{nth}")


def test_synthetic_one_gpu_on_other_firmware_warns_naming_it_and_the_site_may_fail_it():
    text = _odd(H100.read_text(), 4, "96.00.30.00.01")                   # GPU 4 back from an RMA
    r = judge(text)
    assert r.status == "warn" and r.code == "vbios"
    assert r.reason == "NVIDIA H100 80GB HBM3: VBIOS 96.00.74.00.01 on 7 GPUs, GPU 0000:9a:00 96.00.30.00.01"
    s = make_settings("vbios:\n  mismatch: fail\n")
    assert judge(text, s).status == "fail"


def test_pinned_versions_fail_what_the_site_does_not_run():
    s = make_settings("vbios:\n  versions:\n    NVIDIA H100 80GB HBM3: [96.00.89.00.01]\n")
    r = judge(H100.read_text(), s)
    assert r.status == "fail"
    assert r.reason.startswith("GPU 0000:18:00: VBIOS 96.00.74.00.01 not in 96.00.89.00.01 for NVIDIA H100 80GB HBM3")
    assert judge(CSV.read_text(), s).status == "ok"                        # the CSV's H100s run the pinned one
    s = make_settings("vbios:\n  versions: {'*': [94.02.5C.00.03]}\n")
    assert judge(H100.read_text(), s).status == "fail"
    with pytest.raises(UsageError) as e:
        make_settings("vbios:\n  mismatch: drain\n")
    assert e.value.path == "site.yaml" and e.value.line == 2


def test_input_without_vbios_versions_is_unreadable_not_ok():
    for path in (FIX / "local" / "nvml-mock-h100x8-nvidia-smi-535-q-gpu3-fallen-off-bus.txt",
                 FIX / "ecc" / "ml-eng-sram-uncorrectable-grep.txt"):
        with pytest.raises(UsageError, match="no VBIOS version"):
            judge(path.read_text())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["NVIDIA H100", "NVIDIA A100", "N/A"]),
                          st.sampled_from(["96.00.74.00.01", "96.00.30.00.01", "N/A", "[N/A]", "x"])),
                min_size=1, max_size=8))
def test_warns_exactly_when_one_model_runs_two_versions(gpus):
    text = "name, pci.bus_id, vbios_version\n" + "".join(
        f"{m}, 00000000:{i:02X}:00.0, {v}\n" for i, (m, v) in enumerate(gpus))
    readable = [(m, v) for m, v in gpus if v not in ("N/A", "[N/A]")]
    if not readable:
        with pytest.raises(UsageError):
            vbios.evaluate(text, make_settings().vbios)
        return
    r = vbios.evaluate(text, make_settings().vbios)
    models: dict[str, set[str]] = {}
    for m, v in readable:
        models.setdefault(m, set()).add(v)
    assert r.status == ("warn" if any(len(v) > 1 for v in models.values()) else "ok"), (gpus, r.reason)
