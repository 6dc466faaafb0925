"""Issue 34, part one: the hang signature in one sample is `suspect-hung` (never plain busy), a series long enough
is `hung` with its duration; a compute-apps header with no rows is a reading (no process at capture time); negative
or impossible values are refused with the file and line. The captures here are synthetic (named so): the V100
Horovod snapshot the issue describes is kept aside, not in the fixtures."""

import pytest
from hypothesis import given, strategies as st

from slurmkit.efficiency.parse import parse_text
from slurmkit.efficiency.verdict import Thresholds, summarize
from slurmkit.errors import UsageError

TH = Thresholds()
HEAD = "index, name, utilization.gpu [%], power.draw [W], power.limit [W]\n"


def _verdict(text: str, **kw):
    return summarize(parse_text(text, path="synthetic.csv"), TH, **kw)


def test_synthetic_v100_snapshot_spin_wait_is_suspect_hung_not_busy():
    # synthetic: two V100s at 100 % drawing 40-47 W of 250 W, one snapshot (a collective spin-waiting)
    s = _verdict(HEAD + "0, Tesla V100-SXM2-16GB, 100 %, 40.12 W, 250.00 W\n1, Tesla V100-SXM2-16GB, 100 %, 47.00 W, 250.00 W\n")
    assert s["verdict"] == "suspect-hung"
    assert [g["state"] for g in s["gpus"]] == ["suspect-hung", "suspect-hung"]
    assert "no duration" in s["gpus"][0]["evidence"]
    assert any("sample it again" in n for n in s["next_steps"])
    assert not any("interval unknown" in g["evidence"] for g in s["gpus"])


def test_snapshot_at_full_power_is_not_suspect():
    s = _verdict(HEAD + "0, Tesla V100, 100 %, 240.00 W, 250.00 W\n")
    assert s["gpus"][0]["state"] == "unknown"  # one sample: fewer than min_samples, and no hang signature


def test_snapshot_low_sm_activity_is_suspect_hung():
    cap = parse_text(HEAD + "0, A100, 99 %, 300.00 W, 400.00 W\n", path="synthetic.csv")
    cap.gpus[0].add_profile(sm_active=4.0)
    s = summarize(cap, TH)
    assert s["gpus"][0]["state"] == "suspect-hung"
    assert "SM activity" in s["gpus"][0]["evidence"]


def test_series_long_enough_is_hung_with_duration():
    rows = "".join(
        f"2026/12/05 10:{m:02d}:00.000, 0, 100 %, 45.00 W, 250.00 W\n" for m in range(0, 10)
    )  # synthetic: 10 samples a minute apart
    s = _verdict("timestamp, index, utilization.gpu [%], power.draw [W], power.limit [W]\n" + rows)
    g = s["gpus"][0]
    assert g["state"] == "hung" and "10 samples (10.0 min)" in g["evidence"]


def test_series_short_hang_with_interval_is_not_suspect():
    rows = "".join(f"2026/12/05 10:00:{x:02d}.000, 0, 100 %, 45.00 W, 250.00 W\n" for x in range(0, 40, 10))
    rows += "".join(f"2026/12/05 10:01:{x:02d}.000, 0, 100 %, 240.00 W, 250.00 W\n" for x in range(0, 40, 10))
    s = _verdict("timestamp, index, utilization.gpu [%], power.draw [W], power.limit [W]\n" + rows)
    assert s["gpus"][0]["state"] == "busy"  # 40 s at low power, judged with its duration: not hung


@given(
    u=st.integers(0, 100),
    p=st.floats(0, 700, allow_nan=False),
    limit=st.floats(50, 700, allow_nan=False),
)
def test_property_suspect_hung_only_with_the_signature(u, p, limit):
    s = _verdict(HEAD + f"0, GPU, {u} %, {p:.2f} W, {limit:.2f} W\n")
    sig = u >= TH.hung_util_pct and round(p, 2) < TH.hung_power_ratio * round(limit, 2)
    assert (s["gpus"][0]["state"] == "suspect-hung") == sig


def test_compute_apps_header_only_is_no_process_reading():
    cap = parse_text("pid, process_name, used_gpu_memory [MiB]\n", path="synthetic.csv")
    assert cap.gpus == {} and cap.meta["no_processes"]
    assert any("no process on any GPU at capture time" in f.text for f in cap.findings)


def test_query_gpu_header_only_is_still_bad_input():
    with pytest.raises(UsageError, match="no GPU rows"):
        parse_text(HEAD, path="synthetic.csv")


@pytest.mark.parametrize("cells", ["-500 %, 40.00 W", "101 %, 40.00 W", "50 %, -3.00 W"])
def test_negative_or_impossible_values_refused_with_line(cells):
    with pytest.raises(UsageError, match="out of range") as e:
        parse_text(HEAD + "0, GPU, 10 %, 40.00 W, 250.00 W\n" + f"1, GPU, {cells}, 250.00 W\n", path="synthetic.csv")
    assert e.value.line == 3 and e.value.path == "synthetic.csv"
