"""Stragglers (issue 34): the sampler records each GPU's SM clock and clock event reasons (over NVIDIA's real
nvidia-smi 535 on the mock NVML, where the machine has them), and a node of a multi-node job whose GPUs lag the
others is named with its likely cause. The per-node records are built from synthetic samples (named so)."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurmkit.efficiency import record, straggler
from slurmkit.efficiency.model import Capture
from slurmkit.efficiency.verdict import Thresholds

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "dev"))
import fakenvml  # noqa: E402  (dev/fakenvml.py: where the mock NVML and the real binary are)

BRAKE = 0x80  # clocks_event_reasons.active: HW Power Brake Slowdown


def _record(node: str, *, util=97.0, clock=1980.0, power=650.0, reasons=0, gpus=8, sm=None) -> dict:
    """One node's record of a job, from 20 synthetic samples per GPU."""
    cap = Capture(format="slurmkit-sampler", interval=1.0)
    for i in range(gpus):
        g = cap.gpu(i, index=i)
        g.power_limit = 700.0
        for t in range(20):
            g.add(t=float(t), util=util, mem_used=40000.0, power=power, sm_clock=clock, reasons=reasons)
            if sm is not None:
                g.add_profile(sm_active=sm)
    head = {"job_id": 7, "start": 0.0, "gpus": list(range(gpus))}
    return record.build(cap, head, Thresholds(), environ={}, node=node, end=20.0)


def test_a_node_under_the_power_brake_is_the_straggler_with_its_cause():
    recs = {"n2": _record("n2"), "n3": _record("n3", clock=382.0, power=260.0, reasons=BRAKE | 0x1)}
    found = straggler.find(recs, 20.0)
    assert [x["node"] for x in found] == ["n3"]
    x = found[0]
    assert {lag["measure"] for lag in x["lags"]} == {"SM clock", "power"}       # utilisation is the same
    assert x["cause"] == "HW Power Brake Slowdown on GPU 0-7 (100 % of samples)"
    assert x["text"].startswith("straggler n3: SM clock 382 MHz vs 1980 MHz, power 260 W vs 650 W")


def test_half_the_sm_activity_of_its_peers_is_a_straggler_without_a_clock_reason():
    recs = {n: _record(n, sm=70.0) for n in ("a", "b", "c")}
    recs["b"] = _record("b", sm=35.0)
    found = straggler.find(recs, 20.0)
    assert [x["node"] for x in found] == ["b"] and found[0]["cause"] is None
    assert found[0]["lags"] == [{"measure": "SM activity", "value": 35.0, "peers": 70.0, "unit": " %"}]


def test_within_the_margin_or_on_one_node_nothing_is_named():
    assert straggler.find({"n1": _record("n1", clock=382.0, reasons=BRAKE)}, 20.0) == []
    assert straggler.find({"a": _record("a"), "b": _record("b", clock=1700.0, power=600.0)}, 20.0) == []
    # records of an older sampler (no clocks) and of a driver that reads no power: compared on what they have
    old = {n: _record(n) for n in ("a", "b")}
    for g in old["b"]["gpus"]:
        g.pop("sm_clock_median_mhz")
        g["power_median_w"] = None
    assert straggler.find(old, 20.0) == []


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                       st.tuples(st.floats(0, 100), st.floats(0, 3000), st.floats(0, 1000)), min_size=1))
def test_the_fastest_node_never_lags_on_a_measure(vals):
    recs = {n: {"gpus": [{"index": 0, "util_median": u, "sm_clock_median_mhz": c, "power_median_w": p}]}
            for n, (u, c, p) in vals.items()}
    found = straggler.find(recs, 20.0)
    best = {m: max(recs, key=lambda n: recs[n]["gpus"][0][k])
            for m, k in (("utilisation", "util_median"), ("SM clock", "sm_clock_median_mhz"),
                         ("power", "power_median_w"))}
    for x in found:
        for lag in x["lags"]:
            assert lag["value"] < lag["peers"] * 0.8 and x["node"] != best[lag["measure"]]


def test_efficiency_jobid_names_the_straggler(tmp_path):
    """`efficiency JOBID`'s report over the log (the epilog's per-node records): the straggler is a finding."""
    from slurmkit import config

    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"paths:\n  health_log: {tmp_path}/health.jsonl\n")
    s = config.load(str(cfg))
    log = record.log_path(s)
    for node, kw in (("n2", {}), ("n3", {"clock": 382.0, "power": 260.0, "reasons": BRAKE})):
        record.append(log, _record(node, **kw), 1 << 20)
    doc, _ = record.report_for_job(s, 7)
    assert [x["node"] for x in doc["stragglers"]] == ["n3"]
    assert any(f["text"].startswith("straggler n3: SM clock 382 MHz") for f in doc["findings"]), doc["findings"]


@pytest.mark.skipif(bool(fakenvml.available()), reason=str(fakenvml.available()))
def test_the_sampler_records_clocks_and_reasons_from_the_real_nvidia_smi(tmp_path):
    """NVIDIA's nvidia-smi 535 over the mock NVML, one GPU under the power brake at 382 MHz (nvml-mock-ctl)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(fakenvml.MOCK / "lib"),
               MOCK_NVML_CONFIG=str(fakenvml.MOCK / "configs" / "mock-nvml-config-h100.yaml"),
               MOCK_NVML_OVERRIDES=str(tmp_path / "overrides.yaml"))
    ctl = str(fakenvml.MOCK / "bin" / "nvml-mock-ctl")
    for args in (["throttle", "--gpu", "1", "hw_power_brake_slowdown"], ["clocks", "--gpu", "1", "382"]):
        subprocess.run([ctl, *args], env=env, check=True, capture_output=True, timeout=30)
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cmdline").write_bytes(b"slurmstepd: [91.batch]\0")
    out = tmp_path / "91.samples"
    p = subprocess.Popen([sys.executable, "-I", "-m", "slurmkit.efficiency.sampler", "--job", "91", "--gpus", "0,1",
                          "--out", str(out), "--interval", "0.2", "--tool", str(fakenvml.CACHE / "nvidia-smi"),
                          "--backend", "nvidia-smi", "--watchdog", "0.2", "--proc-root", str(tmp_path / "proc")],
                         env=env, cwd=str(REPO))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n[") >= 6):
            time.sleep(0.1)
        (proc / "cmdline").unlink()
        proc.rmdir()
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    cap, head = record.load_samples(out.read_text())
    assert set(cap.gpus[1].sm_clock) == {382.0} and set(cap.gpus[1].reasons) == {BRAKE}, out.read_text()
    assert set(cap.gpus[0].reasons) == {0x1}         # the profile's idle GPU: Idle only
    rec = record.build(cap, head, Thresholds(), environ={}, node="n9")
    assert rec["gpus"][1]["clock_reasons"] == {"hw_power_brake_slowdown": 1.0}
    assert rec["gpus"][1]["sm_clock_median_mhz"] == 382.0 and rec["gpus"][0]["clock_reasons"] is None
