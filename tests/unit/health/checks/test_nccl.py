"""The nccl check on every real all_reduce_perf capture in tests/fixtures/nccl, each verdict written out."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.health import nccl
from slurmkit.health.runner import run_checks

from sitesettings import make_settings

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "nccl"

# file -> (avg bus bandwidth as parsed (None: no table), how, status with no expected value, expected for a
#          "fail below 0.8 x expected" test or None)
EXPECTED = {
    "aws-p4de-2node-all_reduce_perf-srun-label-prefix-awsome.txt": (18.536, "computed", "ok", None),
    "aws-p5-2node-all_reduce_perf-16G-srun-label-prefix-awsome.txt": (124.536, "computed", "ok", None),
    "azure-ndh200v5-8xh200-mpirun-np8-all-reduce-8G-only.txt": (476.967, "footer", "ok", 480.0),
    "gcp-a3mega-h100-2node-16gpu-all_reduce_perf-healthy.txt": (70.742, "footer", "ok", None),
    "gke-a3-high-8xh100-single-node-all-reduce-tail-1G-8G-error-NA-excerpt.txt": (263.126, "computed", "ok", None),
    "h100-2node-16gpu-srun-label-prefix-validation0-NA-8M-8G.txt": (142.735, "footer", "ok", 200.0),
    "mi300x-x8-single-node-rccl-tests-mpirun-np8-8B-8G-asterisk-footer.txt": (110.464, "footer", "ok", None),
    "nccl-info-net-ib-using-ib-and-roce-ml-eng.txt": (None, None, None, None),          # one INFO line: unreadable
    "nccl-warn-net-ib-got-completion-error12-vendor129-ml-eng.txt": (None, None, "fail", None),
    "oci-bm-gpu4-8-8xa100-40gb-all-reduce-g8-64B-to-8G.txt": (81.112, "footer", "ok", None),
    "oci-bm-gpu4.8-a100-sxm4-40gb-1node-8gpu-all_reduce_perf-10G.txt": (232.167, "footer", "ok", 230.0),
    "oci-bm-gpu4.8-a100-sxm4-40gb-2node-16gpu-roce-all_reduce_perf-10G.txt": (191.752, "footer", "ok", None),
    "rtx5090-1gpu-all_reduce_perf-g1-avgbw0-nccl-tests-287.txt": (0.0, "footer", "ok", None),
    "rtx5090-2gpu-all_reduce_perf-debug-info-nccl-warn-cuda-failure-nccl-tests-287.txt": (None, None, "fail", None),
    "rtx5090-4gpu-pcie-no-p2p-all_reduce_perf-slow-nccl-tests-287.txt": (9.09703, "footer", "ok", 27.0),
}


def judge(text, expected=None):
    s = make_settings()
    s.nccl.expected_busbw_gbps = expected
    (r,) = run_checks(s, "full", captures={"nccl": text}).results
    return r


def test_every_nccl_fixture_has_an_expected_verdict():
    assert sorted(p.name for p in FIX.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_nccl_fixture(name):
    avg, how, status, expected = EXPECTED[name]
    text = (FIX / name).read_text()
    if status is None:
        with pytest.raises(UsageError):
            judge(text)
        return
    r = judge(text)
    assert r.status == status, r.reason
    assert r.evidence["avg_bus_bandwidth_gbps"] == avg
    if how:
        assert r.evidence["avg_source"].startswith(how)
    if expected is not None:
        # fires on the real output when the profile expects more, quiet when it matches
        assert judge(text, expected=avg / 0.79).status == "fail"
        ok = judge(text, expected=expected)
        assert ok.status == ("fail" if avg < 0.8 * expected else "ok"), ok.reason


def test_slow_pcie_only_node_fails_its_profile():
    # 4x RTX 5090 without P2P plateaus at ~27 GB/s busbw; its average (9.1) against a profile of 27 fails
    r = judge((FIX / "rtx5090-4gpu-pcie-no-p2p-all_reduce_perf-slow-nccl-tests-287.txt").read_text(), 27.0)
    assert r.status == "fail" and "9.09703" in r.reason


def test_failures_and_warnings_are_evidence():
    p = nccl.parse((FIX / "rtx5090-2gpu-all_reduce_perf-debug-info-nccl-warn-cuda-failure-nccl-tests-287.txt")
                   .read_text())
    assert p["failures"][0].startswith("Test NCCL failure common.cu:392")
    assert "Cuda failure 1 'invalid argument'" in p["warnings"]
    assert p["nccl_version"] == "2.25.1+cuda12.8"
    w = nccl.parse((FIX / "nccl-warn-net-ib-got-completion-error12-vendor129-ml-eng.txt").read_text())["warnings"]
    assert w == ["NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 "
                 "(Recv)"]


def test_labels_and_na_columns():
    p = nccl.parse((FIX / "h100-2node-16gpu-srun-label-prefix-validation0-NA-8M-8G.txt").read_text())
    assert p["rows"] > 5 and p["wrong"] == 0 and p["out_of_bounds"] == 0
    p = nccl.parse((FIX / "gke-a3-high-8xh100-single-node-all-reduce-tail-1G-8G-error-NA-excerpt.txt").read_text())
    assert p["rows"] == 4 and p["peak_busbw_gbps"] == 263.55


def test_wrong_results_fail():
    # SYNTHETIC: the OCI 10G row with a #wrong count of 3 (validation on, corrupt results)
    text = (FIX / "oci-bm-gpu4.8-a100-sxm4-40gb-1node-8gpu-all_reduce_perf-10G.txt").read_text()
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.strip().startswith("10737418240"))
    cells = lines[i].split()
    cells[8] = "3"
    lines[i] = "   ".join(cells)
    assert judge("\n".join(lines)).status == "fail"
