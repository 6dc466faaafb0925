"""dcgm-exporter's /metrics text as an `efficiency --from-file` format: the real A800 scrape (MIG instances, no
PCIe rows for the MIG GPU), and synthetic scrapes (named so) for what that capture does not hold: utilisation,
power, SM activity, several scrapes, and bad input."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.efficiency.parse import parse_file, parse_text
from slurmkit.efficiency.verdict import Thresholds, summarize
from slurmkit.errors import UsageError

A800 = (Path(__file__).resolve().parents[2] / "fixtures" / "gpuutil" /
        "a800-sxm4-x8-dcgm-exporter-metrics-prof-mig-gpu0-3-instances-gpu-i-profile-labels-no-pcie-for-mig-excerpt.txt")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", "/dev/null", *args],
                          capture_output=True, text=True, timeout=60)


def row(name, gpu, value, *, host="n1", gi=None, ts=None):
    lab = f'gpu="{gpu}",UUID="GPU-{gpu:08d}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"'
    if gi is not None:
        lab += f',GPU_I_PROFILE="1g.10gb",GPU_I_ID="{gi}"'
    return f"{name}{{{lab}}} {value}" + (f" {ts}" if ts is not None else "")


def test_the_real_a800_scrape_reads_every_gpu_and_each_mig_instance():
    cap = parse_file(str(A800))
    assert cap.format == "dcgm-exporter" and cap.snapshot and cap.meta["host"] == "msxf-hpc-64-35-ai"
    assert list(cap.gpus) == ["0 GI 3", "0 GI 5", "0 GI 6", 1, 2, 3, 4, 5, 6, 7]
    mig = cap.gpus["0 GI 5"]
    assert mig.mig and mig.uuid == "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418" and mig.name == "NVIDIA A800-SXM4-80GB"
    # GR_ENGINE_ACTIVE stands in for utilisation; tensor and DRAM activity are read (ratios, as %)
    assert cap.gpus[1].util == [0.0] and cap.gpus[1].tensor_active == [0.0] and cap.gpus[1].dram_active == [0.0]
    assert any(f.text == "GPU 0 GI 3: a MIG instance (2g.20gb), judged on its own" for f in cap.findings)
    r = cli("efficiency", "--from-file", str(A800), "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["verdict"] == "idle" and doc["format"] == "dcgm-exporter", r.stderr
    assert [g["index"] for g in doc["gpus"]][:3] == ["0 GI 3", "0 GI 5", "0 GI 6"]


def test_synthetic_scrapes_are_a_series_with_power_and_sm_activity():
    text = "\n".join([
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        row("DCGM_FI_DEV_GPU_UTIL", 0, 100, ts=1700000000000), row("DCGM_FI_DEV_POWER_USAGE", 0, 131.5, ts=1700000000000),
        row("DCGM_FI_PROF_SM_ACTIVE", 0, 0.91, ts=1700000000000), row("DCGM_FI_DEV_FB_USED", 0, 70000, ts=1700000000000),
        row("DCGM_FI_PROF_PCIE_TX_BYTES", 0, 123456),          # a family it does not read: skipped
        row("DCGM_FI_DEV_GPU_UTIL", 0, 98, ts=1700000010000), row("DCGM_FI_DEV_POWER_USAGE", 0, 690.0, ts=1700000010000),
        row("DCGM_FI_PROF_SM_ACTIVE", 0, "NaN", ts=1700000010000),
    ]) + "\n"
    cap = parse_text(text)
    g = cap.gpus[0]
    assert not cap.snapshot and g.util == [100.0, 98.0] and g.power == [131.5, 690.0]
    assert g.sm_active == [91.0, None] and g.mem_used == [70000.0, None] and g.t == [1700000000.0, 1700000010.0]


@pytest.mark.parametrize("text,line,words", [
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5\nDCGM_FI_PROF_SM_ACTIVE{gpu="0"} 45.0\n', 2, "DCGM_FI_PROF_SM_ACTIVE"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} -3\n', 1, "DCGM_FI_DEV_GPU_UTIL"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n', 1, "metric line"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu=0} 5\n', 1, "labels"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="a"} 5\nDCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="b"} 7\n', 2,
     "more than one host"),
    ('# HELP DCGM_FI_DEV_SM_CLOCK SM clock\nDCGM_FI_DEV_SM_CLOCK{gpu="0"} 1980\n', 1, "DCGM_FI_DEV_SM_CLOCK"),
])
def test_synthetic_bad_scrapes_exit_2_with_the_line(tmp_path, text, line, words):
    p = tmp_path / "metrics.txt"
    p.write_text(text)
    r = cli("efficiency", "--from-file", str(p))
    assert r.returncode == 2 and f"{p}:{line}:" in r.stderr and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 100)),
                          st.one_of(st.none(), st.floats(0, 1, allow_nan=False))), min_size=1, max_size=30))
def test_synthetic_roundtrip(samples):
    lines, want_u, want_sm = [], {}, {}
    for gpu, u, sm in samples:
        lines.append(row("DCGM_FI_DEV_GPU_UTIL", gpu, "NaN" if u is None else u))
        lines.append(row("DCGM_FI_PROF_SM_ACTIVE", gpu, "NaN" if sm is None else f"{sm:.6f}"))
        want_u.setdefault(gpu, []).append(None if u is None else float(u))
        want_sm.setdefault(gpu, []).append(None if sm is None else round(float(f"{sm:.6f}") * 100, 6))
    cap = parse_text("\n".join(lines) + "\n")
    for gpu in want_u:
        assert cap.gpus[gpu].util == want_u[gpu]
        assert [None if v is None else round(v, 6) for v in cap.gpus[gpu].sm_active] == want_sm[gpu]
    summarize(cap, Thresholds(min_samples=1))


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet='DCGM_FI{}="0,1 .#\nHELPabcgpu-', max_size=200))
def test_synthetic_noise_reads_or_is_refused(text):
    try:
        cap = parse_text("DCGM_" + text)
    except UsageError:
        return
    summarize(cap, Thresholds(min_samples=1))
