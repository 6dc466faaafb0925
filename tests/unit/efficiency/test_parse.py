"""slurmkit efficiency --from-file over the real captures: every gpuutil fixture reads, with the verdict its
provenance row states; what cannot be read is exit 2 naming the line; each threshold fires on real output and
stays quiet on other real output. Property tests for every parser."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.efficiency.parse import parse_file, parse_text
from slurmkit.efficiency.verdict import Thresholds, summarize
from slurmkit.errors import UsageError
from slurmkit.record import replace

FIX = Path(__file__).resolve().parents[2] / "fixtures"
G = FIX / "gpuutil"

# file -> (job verdict, {gpu: state}); the provenance row's state in words after the #
EXPECTED = {
    "4gpu-shared-node-compute-apps-gpu-uuid-then-query-gpu-foreign-job-gpu2-98pct.txt":
        ("idle", {0: "idle", 1: "idle", 2: "busy", 3: "idle"}),            # mixed: GPU 2 98 %, GPU 1 idle
    "8gpu-query-gpu-index-gpu-recovery-action-noheader-reset-annotated-dcgm-263.txt":
        ("unknown", {1: "unknown"}),                                       # faulty: GPU 1 Reset (a finding)
    "a800-sxm4-x8-dcgm-exporter-metrics-prof-mig-gpu0-3-instances-gpu-i-profile-labels-no-pcie-for-mig-excerpt.txt":
        ("idle", {"0 GI 3": "idle", "0 GI 6": "idle", 1: "idle", 7: "idle"}),   # idle: every PROF ratio 0
    "gtx1080ti-gtx1060-query-gpu-alias-expanded-header-clocks-current-bpytop-26.txt":
        ("idle", {0: "busy", 1: "idle"}),                                  # GPU0 36 % moderately busy, GPU1 idle
    "h200x4-pmon-new-format-jpg-ofa-idle-gpus-dash-rows.txt":
        ("idle", {2: "idle", 4: "idle", 5: "idle", 6: "idle"}),            # idle: every cell "-"
    "h200x8-query-compute-apps-gpu-uuid-pid-name-mem-not-found-foreign-pid-before.txt":
        ("unknown", {}),                                                   # a process list: no utilisation
    "h200x8-query-gpu-after-release-gpu2456-freed-residual-mib.txt":
        ("idle", {0: "busy", 1: "busy", 3: "busy", 2: "idle", 4: "idle", 5: "idle", 6: "idle", 7: "idle"}),
    "k40m-x2-dmon-one-idle-one-97pct-microway-zh.txt": ("idle", {0: "idle", 1: "busy"}),
    "k40m-x2-pmon-two-python-procs-trailing-spaces-microway-zh.txt": ("busy", {0: "busy", 1: "busy"}),
    "morpheus-doc-1gpu-dmon-idle-to-busy-ramp-sm99.txt": ("busy", {0: "busy"}),   # idle ramping to busy
    "quadro-k2200-dmon-i0-d30-nvenc-transcode-sm99-enc98-idle-bookends.txt": ("busy", {0: "busy"}),
    "rtx3060ti-pmon-python3-sm98.txt": ("busy", {0: "busy"}),
    "rtx3090-idle-plus-rtxa6000-100pct-298w-query-gpu-index-name-mem-util-power.txt":
        ("idle", {0: "idle", 1: "busy"}),
    "rtx3090-wsl-query-gpu-csv-l1-training-12.8M-model-util-spikes-power-jump.txt": ("underused", {0: "underused"}),
    "rtx3090-wsl-query-gpu-csv-noheader-fsdp-training-last-row-missing-unit.txt": ("underused", {0: "underused"}),
    "rtxpro6000bw-x2-compute-apps-sglang-92908mib-captured-fixture.txt": ("unknown", {}),   # memory, no util
    "v100-pcie-azure-nvidia-smi-table-row-power-ERR-transient-azhpc-77.txt": ("idle", {1: "idle"}),
    "windows-wddm-compute-apps-all-na-excerpt.txt": ("unknown", {}),
}
# a headerless, unitless table cannot be read without its --query list
NEEDS_FIELDS = {"rtxpro6000bw-x2-compute-apps-noheader-nounits-captured-fixture.txt": "pid,used_memory"}

CAPTURE_TH = Thresholds(min_samples=1)     # a capture is judged as it is: one sample is a snapshot


def cli(*args):
    import os
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_CONFIG"}   # the built-in thresholds
    return subprocess.run([sys.executable, "-m", "slurmkit.cli", *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_every_gpuutil_fixture_is_covered():
    assert sorted([*EXPECTED, *NEEDS_FIELDS]) == sorted(p.name for p in G.iterdir())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_verdict(name):
    verdict, states = EXPECTED[name]
    doc = summarize(parse_file(str(G / name)), CAPTURE_TH)
    assert doc["verdict"] == verdict
    got = {g["index"]: g["state"] for g in doc["gpus"]}
    for k, v in states.items():
        assert got[k] == v, (k, got)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cli_json_shape_no_traceback(name):
    r = cli("efficiency", "--from-file", str(G / name), "--json")
    assert "Traceback" not in r.stderr
    assert r.returncode == (0 if EXPECTED[name][0] == "busy" else 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == EXPECTED[name][0]
    for g in doc["gpus"]:
        assert {"index", "samples", "util_mean", "util_max", "mem_used_mib_max", "power_mean_w", "power_limit_w",
                "state"} <= set(g)
    assert isinstance(doc["findings"], list)


def test_headerless_unitless_needs_fields():
    name = "rtxpro6000bw-x2-compute-apps-noheader-nounits-captured-fixture.txt"
    r = cli("efficiency", "--from-file", str(G / name))
    assert r.returncode == 2 and f"{name}:1:" in r.stderr and "--fields" in r.stderr and "Traceback" not in r.stderr
    r = cli("efficiency", "--from-file", str(G / name), "--fields", NEEDS_FIELDS[name], "--json")
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "unknown"
    assert [p["used_mib"] for p in doc["gpus"][0]["processes"]] == [92908.0, 92908.0]


def test_findings_on_real_quirks():
    rec = summarize(parse_file(str(G / "8gpu-query-gpu-index-gpu-recovery-action-noheader-reset-annotated-dcgm-263.txt")),
                    CAPTURE_TH)
    faults = [f for f in rec["findings"] if f["severity"] == "fault"]
    assert len(faults) == 1 and faults[0]["gpu"] == 1 and "Reset" in faults[0]["text"] and faults[0]["line"] == 2
    cut = summarize(parse_file(str(G / "rtx3090-wsl-query-gpu-csv-noheader-fsdp-training-last-row-missing-unit.txt")),
                    CAPTURE_TH)
    assert any(f["line"] == 11 and "cut" in f["text"] for f in cut["findings"])
    assert cut["gpus"][0]["samples"] == 11                # the utilisation of the cut row is still read
    v100 = summarize(parse_file(str(G / "v100-pcie-azure-nvidia-smi-table-row-power-ERR-transient-azhpc-77.txt")),
                     CAPTURE_TH)
    assert v100["gpus"][0]["power_limit_w"] == 250 and v100["gpus"][0]["power_mean_w"] is None
    assert any("ERR!" in f["text"] for f in v100["findings"])
    h200 = summarize(parse_file(str(G / "h200x8-query-gpu-after-release-gpu2456-freed-residual-mib.txt")), CAPTURE_TH)
    assert any("GPU 7 held 56.7 GiB at 0 %: the job asked for 8 GPUs and used 3" in s for s in h200["next_steps"])
    nf = summarize(parse_file(str(G / "h200x8-query-compute-apps-gpu-uuid-pid-name-mem-not-found-foreign-pid-before.txt")),
                   CAPTURE_TH)
    assert any("1758887" in f["text"] and "not visible" in f["text"] for f in nf["findings"])


def test_dcgmi_and_jobstats_fixtures():
    mig = summarize(parse_file(str(FIX / "dcgm" / "8gpu-node-gpu7-mig-dmon-e-203-204-1001-1002-150-idle-na-units-row-zh-doc.txt")),
                    CAPTURE_TH)
    states = {g["index"]: g["state"] for g in mig["gpus"]}
    assert states[7] == "unknown" and all(states[i] == "idle" for i in range(7))
    az = parse_file(str(FIX / "dcgm" / "azure-nc40ads-h100nvl-dcgm-3.3.9-dmon-e-1001-1002-1005-first-sample-na-verbatim-fixture.txt"))
    assert az.gpus[0].util == [None, 0.0]       # the first sample's N/A is not a 0
    # jobstats on the same jobs: our verdict from its per-GPU means
    della = summarize(parse_file(str(FIX / "slurm" / "princeton-della-2node-4xa100-40gb-jobstats-completed-68pct-gpu-10pct-cpu-notes.txt")),
                      CAPTURE_TH)
    assert sorted(g["util_mean"] for g in della["gpus"]) == [64.5, 65.7, 67.5, 72.9]
    assert della["verdict"] == "busy"           # jobstats' notes are about CPU memory and time, not the GPUs
    # the same job's overall figure as jobstats prints it ("GPU utilization [|||...  68%]"): the mean of its GPUs
    assert round(sum(g["util_mean"] for g in della["gpus"]) / 4) == 68
    k1 = summarize(parse_file(str(FIX / "slurm" / "princeton-della-k1g1-1gpu-jobstats-j-json-summary-98.6pct-gpu-index-1.txt")),
                   CAPTURE_TH)
    assert k1["gpus"][0]["index"] == 1 and k1["verdict"] == "busy"
    migjs = summarize(parse_file(str(FIX / "slurm" / "princeton-della-l01g2-mig-admincomment-decoded-json-no-gpu-utilization-key.txt")),
                      CAPTURE_TH)
    assert migjs["verdict"] == "unknown" and migjs["gpus"][0]["util_mean"] is None   # n/a, not 0 %
    rf = summarize(parse_file(str(FIX / "slurm" / "rockfish-like-a100-gpu06-jobstats-running-1gpu-93pct-gpu-index-1-rst-indented.txt")),
                   CAPTURE_TH)
    assert rf["gpus"][0]["util_mean"] == 92.7
    seff = summarize(parse_file(str(FIX / "slurm" / "rockfish-like-seff-running-zero-efficiency-warning-rst-indented.txt")),
                     CAPTURE_TH)
    assert seff["verdict"] == "unknown" and seff["gpus"] == []
    sa = parse_file(str(FIX / "slurm" / "sacct-fields-jobid-alloctres-P-mig-a100-3g20gb-and-h100-gres-types-slurm-mail-142.txt"))
    assert sa.meta["jobs"]["8117657"] == {"gres/gpu:a100_3g.20gb": "1", "gres/gpu": "1"}


# --- each threshold fires on real output and stays quiet on other real output -----------------------------------

def _state(name, th, **kw):
    return {g["index"]: g["state"] for g in summarize(parse_file(str(G / name)), th, **kw)["gpus"]}


def test_idle_threshold():
    assert _state("h200x8-query-gpu-after-release-gpu2456-freed-residual-mib.txt", CAPTURE_TH)[7] == "idle"
    assert _state("rtx3060ti-pmon-python3-sm98.txt", CAPTURE_TH)[0] == "busy"
    # the fraction: the K2200's idle bookends (2 of 23 samples) are not an idle job, until the fraction says so
    k = "quadro-k2200-dmon-i0-d30-nvenc-transcode-sm99-enc98-idle-bookends.txt"
    assert _state(k, CAPTURE_TH)[0] == "busy"
    assert _state(k, replace(CAPTURE_TH, idle_fraction=0.05))[0] == "idle"
    # the utilisation bar: GPU 0 of the GTX pair (36 %) is idle only when the bar is raised above it
    assert _state("gtx1080ti-gtx1060-query-gpu-alias-expanded-header-clocks-current-bpytop-26.txt",
                  replace(CAPTURE_TH, idle_util_pct=40, underused_util_pct=50))[0] == "idle"


def test_underused_threshold():
    wsl = "rtx3090-wsl-query-gpu-csv-l1-training-12.8M-model-util-spikes-power-jump.txt"
    assert _state(wsl, CAPTURE_TH)[0] == "underused"
    assert _state(wsl, replace(CAPTURE_TH, underused_util_pct=15))[0] == "busy"
    assert _state("quadro-k2200-dmon-i0-d30-nvenc-transcode-sm99-enc98-idle-bookends.txt", CAPTURE_TH)[0] == "busy"


def test_hung_threshold_real_k2200():
    # Quadro K2200: sm 73-99 % at 21-33 W of its 39 W board limit, dmon -d 30 (provenance). Quiet by default
    # (power is well above 0.35 x 39 W); fires when the power ratio is set above what it drew, for 21 x 30 s.
    k = "quadro-k2200-dmon-i0-d30-nvenc-transcode-sm99-enc98-idle-bookends.txt"
    assert _state(k, CAPTURE_TH, interval=30, power_limit=39)[0] == "busy"
    assert _state(k, replace(CAPTURE_TH, hung_power_ratio=0.9, hung_util_pct=70), interval=30, power_limit=39)[0] == "hung"
    # the duration: the same run is not hung when it must last longer than the capture
    assert _state(k, replace(CAPTURE_TH, hung_power_ratio=0.9, hung_util_pct=70, hung_seconds=3600),
                  interval=30, power_limit=39)[0] == "busy"
    # no interval known: never "hung", but the evidence says what it saw
    doc = summarize(parse_file(str(G / k)), replace(CAPTURE_TH, hung_power_ratio=0.9, hung_util_pct=70), power_limit=39)
    assert doc["gpus"][0]["state"] == "busy" and "not judged hung" in doc["gpus"][0]["evidence"]


def test_hung_synthetic_stuck_collective():
    # synthetic: a stuck NCCL all-reduce, 100 % utilisation at 120 W of a 700 W H100 for 6 minutes (10 s samples)
    rows = ["timestamp, index, utilization.gpu [%], power.draw [W], power.limit [W]"]
    rows += [f"2026/12/01 10:{i // 6:02d}:{(i % 6) * 10:02d}.000, 0, 100 %, 120.00 W, 700.00 W" for i in range(36)]
    doc = summarize(parse_text("\n".join(rows) + "\n"), Thresholds())
    assert doc["verdict"] == "hung" and doc["gpus"][0]["power_limit_w"] == 700


def test_min_samples_unknown():
    m = "morpheus-doc-1gpu-dmon-idle-to-busy-ramp-sm99.txt"
    assert _state(m, Thresholds(min_samples=10))[0] == "unknown"
    assert _state(m, Thresholds(min_samples=9))[0] == "busy"


# --- bad input: exit 2 with the file and line ---------------------------------------------------------------------

@pytest.mark.parametrize("text,line,words", [
    ("index, utilization.gpu [%]\n0, 5 %\n1, lots\n", 3, "expected a number"),
    ("index, utilization.gpu [%]\n0, 5 %, 7\n1, 3 %\n", 2, "fields"),
    ('Field "utilisation.gpu" is not a valid field to query.\n', 1, "did not measure"),
    ("# gpu   pwr    sm\n# Idx     W     %\n    0    43\n", 3, "columns"),
    ("hello world\n", 1, "unrecognised"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 1, "did not measure"),
    ("#Entity   GRACT\nID\nGPU 0  0.1  0.2\n", 3, "values"),
])
def test_bad_input_exit_2(tmp_path, text, line, words):
    p = tmp_path / "cap.txt"
    p.write_text(text)
    r = cli("efficiency", "--from-file", str(p))
    assert r.returncode == 2, r
    assert f"{p}:{line}:" in r.stderr and words in r.stderr and "Traceback" not in r.stderr


def test_fifo_refused(tmp_path):
    import os
    f = tmp_path / "fifo"
    os.mkfifo(f)
    r = cli("efficiency", "--from-file", str(f))
    assert r.returncode == 2 and "FIFO" in r.stderr


# --- property tests: every parser either reads or raises UsageError, never anything else -------------------------

_cell = st.one_of(st.integers(0, 200).map(str), st.integers(0, 100).map(lambda v: f"{v} %"),
                  st.floats(0, 1000, allow_nan=False).map(lambda v: f"{v:.2f} W"),
                  st.integers(0, 90000).map(lambda v: f"{v} MiB"), st.sampled_from(["[N/A]", "ERR!", "-", "N/A",
                                                                                     "[Not Supported]", "x,y", ""]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_cell, min_size=1, max_size=6), min_size=1, max_size=8),
       st.sampled_from(["index, utilization.gpu [%], power.draw [W], memory.used [MiB]", None,
                        "# gpu   pwr    sm   mem", "#Entity   GRACT   SMACT", "# gpu pid type sm mem command"]))
def test_parsers_never_crash(rows, header):
    text = ((header + "\n") if header else "") + "\n".join(", ".join(r) if header is None or "," in header
                                                           else "  ".join(["0", *r]) for r in rows) + "\n"
    try:
        cap = parse_text(text)
    except UsageError:
        return
    summarize(cap, Thresholds(min_samples=1))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 100)),
                          st.one_of(st.none(), st.floats(0, 700, allow_nan=False))), min_size=1, max_size=40))
def test_csv_roundtrip(samples):
    lines = ["index, utilization.gpu [%], power.draw [W]"]
    for idx, u, p in samples:
        lines.append(f"{idx}, {'[N/A]' if u is None else f'{u} %'}, {'[N/A]' if p is None else f'{p:.2f} W'}")
    cap = parse_text("\n".join(lines) + "\n")
    for idx in {s[0] for s in samples}:
        want = [float(u) if u is not None else None for i, u, _ in samples if i == idx]
        assert cap.gpus[idx].util == want
    doc = summarize(cap, Thresholds(min_samples=1))
    for g in doc["gpus"]:
        us = [u for i, u, _ in samples if i == g["index"] and u is not None]
        assert g["samples"] == len(us)
        assert g["state"] == "unknown" if not us else g["state"] in ("busy", "underused", "idle")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100), st.integers(0, 400)), min_size=1, max_size=30))
def test_dmon_roundtrip(rows):
    text = "# gpu   pwr    sm   mem\n# Idx     W     %     %\n" + "".join(
        f"{i:>5} {p:>5} {s:>5} {0:>5}\n" for i, s, p in rows)
    cap = parse_text(text)
    for idx in {r[0] for r in rows}:
        assert cap.gpus[idx].util == [float(s) for i, s, _ in rows if i == idx]
        assert cap.gpus[idx].power == [float(p) for i, _, p in rows if i == idx]


def test_plot_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "util.png"
    r = cli("efficiency", "--from-file", str(G / "quadro-k2200-dmon-i0-d30-nvenc-transcode-sm99-enc98-idle-bookends.txt"),
            "--plot", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sparkline_in_text():
    r = cli("efficiency", "--from-file", str(G / "morpheus-doc-1gpu-dmon-idle-to-busy-ramp-sm99.txt"))
    assert "▁▁▁▁▇▇█▇▇" in r.stdout and "verdict: busy" in r.stdout


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["nvidia-smi-csv", "nvidia-smi-dmon", "nvidia-smi-pmon", "dcgmi-dmon", "nvidia-smi-table",
                        "jobstats", "jobstats-json", "seff", "sacct"]),
       st.lists(st.text(alphabet=st.sampled_from(list("0123456789 ,.|%#-:/{}[]\"GPUWMiBN/Aabcdefghijklmnopqrstuvwxyz")),
                        max_size=60), min_size=1, max_size=12))
def test_every_parser_reads_or_says_why(fmt, lines):
    """Any text, any forced format: a Capture or a UsageError (exit 2), never another exception."""
    try:
        cap = parse_text("\n".join(lines) + "\n", fmt=fmt)
    except UsageError:
        return
    summarize(cap, Thresholds(min_samples=1))
