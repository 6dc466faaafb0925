"""ecc, pcie, driver, gpu_count and gpu_procs on every real nvidia-smi capture in tests/fixtures/ecc (and the
misc/ ones the checks read), each verdict written out. `None` = the check cannot read that input (exit 2)."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.health.runner import run_checks

from sitesettings import make_settings

FIX = Path(__file__).resolve().parents[3] / "fixtures"

# file -> {check: expected status (None: unreadable for that check)}
EXPECTED = {
    "ecc/a6000-3090-workstation-query-gpu-pcie-gen-width-idle.csv.txt":
        {"ecc": None, "pcie": "ok", "driver": None},                       # Gen1 at idle is not a fault
    "ecc/egpu-gtx1060-thunderbolt-query-gpu-pcie-x4.csv.txt":
        {"ecc": None, "pcie": "ok", "driver": None},                       # no max column: x4 cannot be judged
    "ecc/gpu-2gb-noheader-nounits-fan-NA-new-driver.txt": {"ecc": None, "pcie": None, "driver": None},
    "ecc/gpu-2gb-noheader-nounits-fan-not-supported-old-driver.txt": {"ecc": None, "pcie": None, "driver": None},
    "ecc/gpud-rtx4090-8gpu-q-535-first-gpu-ecc-disabled-na.txt":
        {"ecc": "ok", "pcie": "ok", "driver": "ok", "gpu_count": "ok", "gpu_procs": "ok"},
    "ecc/h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt":
        {"ecc": "ok", "pcie": "ok", "driver": "ok", "gpu_count": "ok", "gpu_procs": "ok"},
    "ecc/l40s-x8-pcie-link-gen-width-idle-gen1.txt": {"ecc": None, "pcie": "ok", "driver": None},
    "ecc/ml-eng-a100-sxm4-80gb-q-xid63-remap-pending.txt":
        {"ecc": "fail", "pcie": None, "driver": "ok", "gpu_count": "ok"},   # Remapped Rows Pending: Yes
    "ecc/ml-eng-h100-query-gpu-vbios.csv.txt": {"ecc": None, "pcie": None, "driver": None},
    "ecc/ml-eng-sram-uncorrectable-ecc-section.txt": {"ecc": "fail", "pcie": None, "driver": None},
    "ecc/ml-eng-sram-uncorrectable-grep.txt": {"ecc": "fail", "pcie": None, "driver": None},
    "ecc/princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt":
        {"ecc": "ok", "pcie": "ok", "driver": "ok", "gpu_count": "ok", "gpu_procs": "ok"},
    "ecc/princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt":
        {"ecc": "ok", "pcie": "fail", "driver": "ok", "gpu_count": "ok", "gpu_procs": "ok"},   # x2 of x16
    "ecc/rtx-pro-6000-blackwell-query-remapped-rows-csv-after-reset.txt":
        {"ecc": "ok", "pcie": None, "driver": None},                       # pending went back to No after reset
    "ecc/rtx5060ti-x2-pcie-link-gen3-x8-vs-max-x16.txt": {"ecc": None, "pcie": "fail", "driver": None},
    "ecc/rtxpro6000-bse-aws-clocks-event-reasons-csv.txt": {"ecc": None, "pcie": None, "driver": None},
    "ecc/rtxpro6000-bw-q-d-ecc-dram-uncorrectable-excerpt.txt": {"ecc": "fail", "pcie": None, "driver": None},
    "misc/ml-eng-h100-dmesg-pcie-limited-by.txt": {"pcie": "fail"},                   # Gen5 card on a Gen4 link
    "misc/k80-nvidia-smi-unable-to-determine-device-handle.txt": {"gpu_count": "fail", "ecc": "fail"},
    "misc/k80-nvidia-debugdump-list-unknown-error.txt": {"gpu_count": "fail"},
    "xid/akash-provider-nvidia-smi-device-handle-unknown-error.txt": {"gpu_count": "fail"},
}


def judge(check, text, settings=None):
    (r,) = run_checks(settings or make_settings(), "full", captures={check: text}).results
    return r


def test_every_ecc_fixture_has_an_expected_verdict():
    assert sorted(p.name for p in (FIX / "ecc").iterdir()) == sorted(
        k.split("/")[1] for k in EXPECTED if k.startswith("ecc/"))


@pytest.mark.parametrize("name,check", [(n, c) for n, m in sorted(EXPECTED.items()) for c in m])
def test_fixture_verdict(name, check):
    want = EXPECTED[name][check]
    text = (FIX / name).read_text()
    if want is None:
        with pytest.raises(UsageError):
            judge(check, text)
    else:
        r = judge(check, text)
        assert r.status == want, r.reason


def test_findings_name_what_was_seen():
    r = judge("ecc", (FIX / "ecc/ml-eng-a100-sxm4-80gb-q-xid63-remap-pending.txt").read_text())
    assert "0000:10:1c" in r.reason and "row remapping pending" in r.reason
    assert r.evidence["gpus"][0]["remap_pending"] == "Yes"
    r = judge("ecc", (FIX / "ecc/ml-eng-sram-uncorrectable-ecc-section.txt").read_text())
    assert r.evidence["gpus"][0]["volatile_uncorrectable"] == 1
    assert r.evidence["gpus"][0]["aggregate_sram_uncorrectable"] == 5
    r = judge("ecc", (FIX / "ecc/rtxpro6000-bw-q-d-ecc-dram-uncorrectable-excerpt.txt").read_text())
    assert "2 volatile uncorrectable" in r.reason
    r = judge("pcie", (FIX / "ecc/princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt")
              .read_text())
    assert "x2 (max x16)" in r.reason


def test_thresholds_are_config():
    s = make_settings()
    s.ecc.volatile_uncorrectable_max = 1
    s.ecc.aggregate_sram_uncorrectable_max = 5
    assert judge("ecc", (FIX / "ecc/ml-eng-sram-uncorrectable-ecc-section.txt").read_text(), s).status == "ok"
    s.pcie.min_width = 2          # a POWER9 site whose GPUs hang off NVLink with a x2 PCIe link
    text = (FIX / "ecc/princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt").read_text()
    assert judge("pcie", text, s).status == "ok"
    s.ecc.require_ecc_enabled = True
    assert judge("ecc", (FIX / "ecc/h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt").read_text(),
                 s).status == "fail"


def test_driver_pins():
    s = make_settings()
    s.driver.driver_versions = ["545.23.08"]
    s.driver.cuda_versions = ["12.3"]
    text = (FIX / "ecc/princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt").read_text()
    assert judge("driver", text, s).status == "ok"
    s.driver.driver_versions = ["550.54.15"]
    r = judge("driver", text, s)
    assert r.status == "fail" and "545.23.08" in r.reason


def test_gpu_count_against_expected():
    text = (FIX / "ecc/princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt").read_text()
    s = make_settings()
    s.gpu_count.expected = 8
    r = judge("gpu_count", text, s)
    assert (r.status, r.reason) == ("fail", "1 of 8 GPUs visible")
    s.gpu_count.per_node = {"n[1-4]": 1}
    (r,) = run_checks(s, "full", captures={"gpu_count": text}, node="n3").results
    assert r.status == "ok"


def test_unknown_error_in_ecc_mode_is_a_finding():
    # SYNTHETIC: the healthy H100 capture with ECC mode reading "Unknown Error" (no capture of that state)
    text = (FIX / "ecc/princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt").read_text()
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.strip() == "ECC Mode")
    lines[i + 1] = lines[i + 1].replace("Enabled", "Unknown Error")
    r = judge("ecc", "\n".join(lines))
    assert r.status == "fail" and "Unknown Error" in r.reason


# --- dead checks from other projects (DESIGN.md): each must fire here --------------------------------------

def test_regression_ecc_sum_over_one_column_csv_fires():
    # A script summing "the second column" of a one-column query never saw a non-zero count. SYNTHETIC rows:
    # `--query-gpu=ecc.errors.uncorrected.volatile.total --format=csv[,noheader]` with one bad GPU of four.
    with_header = "ecc.errors.uncorrected.volatile.total\n0\n0\n2\n0\n"
    r = judge("ecc", with_header)
    assert r.status == "fail" and "GPU 2: 2 volatile uncorrectable" in r.reason
    from slurmkit.health.checks import ecc
    r = ecc.evaluate("0\n0\n2\n0\n", make_settings().ecc, columns=["ecc.errors.uncorrected.volatile.total"])
    assert r.status == "fail"
    assert judge("ecc", "ecc.errors.uncorrected.volatile.total\n0\n[N/A]\n[Not Supported]\n0\n").status == "ok"


def test_regression_remapped_rows_columns_are_read_by_name():
    # A check that read the pending flag from the wrong column index never fired. The real capture after a reset
    # is quiet; the same rows before the reset (pending Yes, SYNTHETIC: the author reports Yes -> No) must fail,
    # whatever the column order.
    real = (FIX / "ecc/rtx-pro-6000-blackwell-query-remapped-rows-csv-after-reset.txt").read_text()
    assert judge("ecc", real).status == "ok"
    before = real.replace("GPU-455e672a-..., 0, 1, No, No", "GPU-455e672a-..., 0, 1, Yes, No")
    r = judge("ecc", before)
    assert r.status == "fail" and "GPU-455e672a" in r.reason
    reordered = ("remapped_rows.failure, remapped_rows.pending, gpu_uuid\nNo, No, GPU-a\nNo, Yes, GPU-b\n")
    r = judge("ecc", reordered)
    assert r.status == "fail" and "GPU-b" in r.reason and "GPU-a" not in r.reason
    assert judge("ecc", "remapped_rows.failure, remapped_rows.pending, gpu_uuid\nYes, No, GPU-c\n").status == "fail"


def test_retired_pages_pending_old_gpus():
    # SYNTHETIC: the driver-418 V100 capture with "Pending : Yes" under Retired Pages
    text = (FIX / "ecc/princeton-traverse-power9-v100-sxm2-q-driver418-old-ecc-format-x2-link.txt").read_text()
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.strip() == "Retired Pages")
    assert lines[i + 3].strip().startswith("Pending")
    lines[i + 3] = lines[i + 3].replace("No", "Yes")
    r = judge("ecc", "\n".join(lines))
    assert r.status == "fail" and "retired pages pending" in r.reason
    # and a Double Bit volatile total in the old layout
    lines = text.splitlines()
    j = next(n for n, ln in enumerate(lines) if ln.strip() == "Double Bit")
    k = next(n for n in range(j, len(lines)) if lines[n].strip().startswith("Total"))
    lines[k] = lines[k].replace(": 0", ": 3")
    assert judge("ecc", "\n".join(lines)).status == "fail"


def test_a_gpu_that_fell_off_the_bus_is_not_a_visible_gpu():
    """NVIDIA's real nvidia-smi 535 over the mock NVML with GPU 3 failed `fallen_off_bus` (tests/fixtures/local,
    FIXTURES-PROVENANCE.md): it still lists 8 GPUs, GPU 3's fields read "GPU is lost". gpu_count fails naming it,
    with the count of the working ones; the same node before the fault (every field readable) passes."""
    from slurmkit.health.checks import gpu_count

    text = (FIX / "local" / "nvml-mock-h100x8-nvidia-smi-535-q-gpu3-fallen-off-bus.txt").read_text()
    r = gpu_count.evaluate(text, 8)
    assert r.status == "fail" and r.code == "gpu_count", r
    assert r.reason == "GPU 00000000:4B:00.0 is lost (nvidia-smi reads 'GPU is lost'); 7 of 8 GPUs working"
    assert r.evidence["lost"] == ["00000000:4B:00.0"]
    healthy = text.replace("GPU is lost", "0 MiB")          # synthetic: the same text with the lost fields read
    assert gpu_count.evaluate(healthy, 8).status == "ok"
