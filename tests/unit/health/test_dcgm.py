"""The dcgm check on real `dcgmi diag` captures of DCGM 2.x-4.x (tests/fixtures/dcgm/, provenance in
FIXTURES-PROVENANCE.md): every verdict written out; wrapped cells reassembled; unreadable input never ok."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.health import dcgm

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
REPO = Path(__file__).resolve().parents[3]

# fixture -> (status, words the reason must hold); the provenance row states each verdict
EXPECTED = {
    "v100-pcie-dcgmi-diag-r1-pass.txt": ("ok", ["9 tests passed"]),
    "v100-pcie-dcgmi-diag-r2-v-pass-info-wrapped.txt": ("ok", ["11 tests passed"]),
    "v100-pcie-dcgmi-diag-r3-v-pass-info-wrapped.txt": ("ok", ["15 tests passed", "1 skipped"]),
    "meta-gcm-htc-dcgmi-diag-r4-pass-legacy-blacklist-no-metadata.txt": ("ok", ["18 tests passed"]),
    "rtxpro6000-bse-dcgmi-diag-r3-deployment-pass-rest-skip.txt": ("warn", ["no test beyond deployment"]),
    "azure-ndh200v5-dcgmi-diag-r1-persistence-fail-wrapped-truncated.txt":
        ("fail", ["Persistence Mode failed", "currently disabled"]),
    "b200-x8-dcgm-4.4.1-diag-r2-pcie-fail-under-slurm-per-gpu-pass.txt": ("fail", ["pcie failed", "internal error"]),
    "l40s-x4-dcgm-4.2.3-diag-pcie-fail-internal-error-per-gpu-lines-no-footer.txt": ("fail", ["pcie failed"]),
    "h100x8-dcgm-3.3.8-diag-r3-fail-early-fabricmanager-down-cuinit-system-not-yet-initialized.txt":
        ("fail", ["GPU Memory failed on every GPU", "cuInit"]),
    "rtx3090x8-dcgmi-diag-r2-pcie-fail-wrapped-warning.txt": ("fail", ["PCIe failed on every GPU",
                                                                       "cudaDeviceGetByPCIBusId"]),
    # DCGM 2.4.6 reports PCIe Fail on a system without NVLink (a false failure of DCGM's, DCGM #49): slurmkit
    # reports what DCGM says; the evidence carries DCGM's text for the admin
    "a100-pcie-dcgm-2.4.6-diag-r2-pcie-fail-nvlink-down-warning-wrapped-dcgm-49.txt": ("fail", ["PCIe failed"]),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_diag_capture_gets_its_verdict(name):
    status, words = EXPECTED[name]
    st_, reason, ev = dcgm.verdict(dcgm.parse_diag((FIX / name).read_text()))
    assert st_ == status, reason
    for w in words:
        assert w in reason


def test_wrapped_cells_are_reassembled_mid_word():
    p = dcgm.parse_diag((FIX / "azure-ndh200v5-dcgmi-diag-r1-persistence-fail-wrapped-truncated.txt").read_text())
    (t,) = [t for t in p["tests"] if t["name"] == "Persistence Mode"]
    text = t["messages"][0]["text"]
    assert "GPU 0 is currently disabled. The DCGM diagnostic requires peristence mode" in text   # DCGM's typo
    assert "disab led" not in text and "disabled" in text


def test_dcgm4_per_gpu_lines_are_read_per_gpu():
    p = dcgm.parse_diag((FIX / "b200-x8-dcgm-4.4.1-diag-r2-pcie-fail-under-slurm-per-gpu-pass.txt").read_text())
    (pcie,) = [t for t in p["tests"] if t["name"] == "pcie"]
    assert pcie["result"] == "fail" and pcie["gpus"] == {i: "pass" for i in range(8)}
    assert p["version"] == "4.4.1"


def test_a_table_printed_twice_counts_once():
    p = dcgm.parse_diag((FIX / "rtxpro6000-bse-dcgmi-diag-r3-deployment-pass-rest-skip.txt").read_text())
    assert len([t for t in p["tests"] if t["name"] == "PCIe"]) == 1


def test_mixed_mig_cannot_run_is_a_warn_never_ok_nor_a_drain():
    text = "Error: Cannot run diagnostic: MIG mode is mixed on the GPUs of this group.\n"   # synthetic
    st_, reason, _ = dcgm.verdict(dcgm.parse_diag(text))
    assert st_ == "warn" and "could not run" in reason


@pytest.mark.parametrize("text", ["", "random words\n", "| a | b |\n", "\x00\xff" * 10, "{", "[1, 2]"])
def test_unreadable_input_is_an_error_not_ok(text):
    with pytest.raises(dcgm.DcgmParseError):
        dcgm.verdict(dcgm.parse_diag(text))


def test_diag_json_of_dcgm3_and_4_synthetic():
    """SYNTHETIC documents in the two `dcgmi diag -j` shapes (no complete real capture exists: DCGM #139 is cut)."""
    doc3 = {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
            {"gpu_id": "0", "status": "Pass"}, {"gpu_id": "1", "status": "Fail",
                                                "warnings": [{"warning": "GPU 1 DBE"}]}]}]}]}}
    st_, reason, _ = dcgm.verdict(dcgm.parse_diag(json.dumps(doc3)))
    assert st_ == "fail" and "GPU Memory failed on GPU 1" in reason and "DBE" in reason
    doc4 = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "status": "Pass", "results": [{"entity_id": 0, "status": "Pass"}]}]}]}}
    assert dcgm.verdict(dcgm.parse_diag(json.dumps(doc4)))[0] == "ok"
    with pytest.raises(dcgm.DcgmParseError, match="unrecognised"):
        dcgm.parse_diag(json.dumps({"something": "else"}))


def test_health_json_reads_the_overall_verdict():
    h = dcgm.parse_health_json((FIX / "gpu1-reset-required-dcgmi-health-c-j-healthy-false-negative-dcgm-263.txt")
                               .read_text())
    assert h == {"overall": "Healthy", "incidents": []}     # DCGM #263: Healthy while GPU 1 needs a reset
    with pytest.raises(dcgm.DcgmParseError):
        dcgm.parse_health_json('{"body": {}}')


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["| Diagnostic | Result |", "|-----  Hardware  ---+---|", "| PCIe | Pass |",
                                 "| GPU Memory | Fail - All |", "| Warning | text |", "|    | more text |",
                                 "|    | GPU0: Pass |", "+----+----+", "| x | Skip - All", "garbage"]),
                max_size=30), st.text(max_size=40))
def test_property_never_a_traceback_and_ok_only_with_a_passed_test(lines, noise):
    text = "\n".join(lines) + "\n" + noise
    try:
        p = dcgm.parse_diag(text)
    except dcgm.DcgmParseError:
        return
    status, reason, ev = dcgm.verdict(p)
    assert status in ("ok", "warn", "fail")
    json.dumps(ev)
    if status == "ok":
        assert any(t["result"] == "pass" for t in p["tests"])
        assert not any(t["result"] == "fail" for t in p["tests"])


def _check(args, scenario, tmp_path, **cfg):
    conf = tmp_path / "c.yaml"
    fake = REPO / "dev" / "fakegpu" / "bin"
    conf.write_text(f"tools:\n  dcgmi: {fake}/dcgmi\npaths:\n  state_dir: {tmp_path}/state\n  health_log: "
                    f"{tmp_path}/log/\n" + "".join(f"{k}\n" for k in cfg.values()))
    env = dict(os.environ, SLURMKIT_FAKEGPU_SCENARIO=str(REPO / "dev" / "fakegpu" / "scenarios" / scenario))
    return subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", str(conf), "check", "--json", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_capture_from_the_cli_and_an_unreadable_capture_exits_2(tmp_path):
    r = _check(["--capture", f"dcgm={FIX / 'rtx3090x8-dcgmi-diag-r2-pcie-fail-wrapped-warning.txt'}"], "dcgm-fail",
               tmp_path)
    assert r.returncode == 1 and json.loads(r.stdout)["results"][0]["status"] == "fail"
    bad = tmp_path / "bad.txt"
    bad.write_text("not dcgm\n")
    r = _check(["--capture", f"dcgm={bad}"], "dcgm-fail", tmp_path)
    assert r.returncode == 2 and "dcgm" in r.stderr


def test_live_run_caches_for_the_prolog_and_a_hung_dcgmi_is_a_finding(tmp_path):
    r = _check(["--only", "dcgm"], "dcgm-fail", tmp_path)
    (res,) = json.loads(r.stdout)["results"]
    assert r.returncode == 1 and res["status"] == "fail" and "GPU Memory failed" in res["reason"]
    assert (tmp_path / "state").glob("dcgm-*.json")
    t = time.monotonic()
    r = _check(["--only", "dcgm"], "dcgm-hang", tmp_path, d="dcgm:\n  timeout: 2")
    assert time.monotonic() - t < 60
    (res,) = json.loads(r.stdout)["results"]
    assert r.returncode == 1 and res["status"] == "fail" and "timed out" in res["reason"]
