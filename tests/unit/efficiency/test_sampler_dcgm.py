"""The sampler's dcgmi dmon child (SM / tensor / DRAM activity) against the fake dcgmi: a real child process
replaying a SYNTHETIC series (dev/fakegpu/scenarios/eff-*/dcgm-dmon-series.txt); a dcgmi that is missing, fails
or hangs leaves the sampler sampling and the record saying why. The "busy running little" finding fires / stays
quiet; its thresholds' ranges are validated."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from slurmkit.efficiency import record
from slurmkit.efficiency.model import Capture
from slurmkit.efficiency.sampler_dcgm import DCGM_COLS, dcgm_row
from slurmkit.efficiency.verdict import Thresholds, summarize
from slurmkit.settings import EfficiencySettings

REPO = Path(__file__).resolve().parents[3]
FAKE = REPO / "dev" / "fakegpu"
SMI, DCGMI = str(FAKE / "bin" / "nvidia-smi"), str(FAKE / "bin" / "dcgmi")


def _run(tmp_path, scenario: Path, *, dcgmi=DCGMI, rows=8, start_timeout=30.0, session=False):
    """Run the sampler for a 2-GPU job until `rows` nvidia-smi sample lines (and a dcgm line or event) are
    written, then end the job (its fake slurmstepd goes) and return (record, sample-file lines, sampler)."""
    procroot = tmp_path / "proc"
    stepd = procroot / "4242"
    stepd.mkdir(parents=True)
    (stepd / "cmdline").write_bytes(b"slurmstepd: [91.batch]\0")
    out = tmp_path / "91.samples"
    env = dict(os.environ, SLURMKIT_FAKEGPU_SCENARIO=str(scenario))
    p = subprocess.Popen([sys.executable, "-I", "-m", "slurmkit.efficiency.sampler", "--job", "91", "--gpus", "0,2",
                          "--out", str(out), "--interval", "0.2", "--tool", SMI, "--backend", "nvidia-smi",
                          "--watchdog", "0.2", "--proc-root", str(procroot), "--dcgmi", json.dumps([dcgmi]),
                          "--dcgm-start-timeout", str(start_timeout)],
                         env=env, cwd=str(REPO), start_new_session=session)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = out.read_text() if out.exists() else ""
            smi = sum(1 for ln in text.splitlines() if ln.startswith("[") and '"dcgm"' not in ln)
            dcgm = sum(1 for ln in text.splitlines() if ln.startswith("[") and '"dcgm"' in ln)
            if smi >= rows and (dcgm >= rows or "dcgm-unavailable" in text):
                break
            time.sleep(0.1)
        if session:
            return None, out, p
        (stepd / "cmdline").unlink()
        stepd.rmdir()
        assert p.wait(timeout=30) == 0
    finally:
        if not session and p.poll() is None:
            p.kill()
    cap, head = record.load_samples(out.read_text())
    return record.build(cap, head, Thresholds(), environ={}, node="n1"), out.read_text(), p


def test_hung_job_gets_sm_activity_and_the_busy_running_little_finding(tmp_path):
    rec, text, _ = _run(tmp_path, FAKE / "scenarios" / "eff-hung")
    assert rec["profiling"] == {"source": "dcgmi", "state": "ok"}
    g0, g2 = rec["gpus"]
    assert (g0["index"], g2["index"]) == (0, 2)           # only the job's GPUs, though dcgmi printed 8
    assert 2 <= g0["sm_active_mean"] <= 8 and g0["tensor_active_mean"] <= 1 and g0["dram_active_mean"] == 1
    assert g0["profile_samples"] >= 3
    texts = [f["text"] for f in rec["findings"]]
    assert any(t.startswith("GPU 0: 100% utilisation but ") and "% SM activity" in t for t in texts), texts
    assert rec["verdict"] == "busy"        # too short for hung_seconds=300: the SM finding is what says it


def test_busy_job_reports_activity_and_stays_quiet(tmp_path):
    rec, _, _ = _run(tmp_path, FAKE / "scenarios" / "eff-busy")
    assert rec["profiling"]["state"] == "ok" and rec["verdict"] == "busy"
    for g in rec["gpus"]:
        assert 65 <= g["sm_active_mean"] <= 80 and 38 <= g["tensor_active_mean"] <= 46
    assert not any("SM activity" in f["text"] for f in rec["findings"])
    assert not any("running little" in s for s in rec["next_steps"])


def _scenario(tmp_path, dcgmi_line: str, extra: dict | None = None) -> Path:
    d = tmp_path / "scen"
    d.mkdir()
    shutil.copy(FAKE / "scenarios" / "eff-busy" / "query-gpu-series.csv", d)
    smi = (FAKE / "scenarios" / "eff-busy" / "responses").read_text().splitlines()[1]
    (d / "responses").write_text(smi + "\n" + dcgmi_line + "\n")
    for k, v in (extra or {}).items():
        (d / k).write_text(v)
    return d


def test_missing_dcgmi_is_said_and_sampling_goes_on(tmp_path):
    rec, _, _ = _run(tmp_path, FAKE / "scenarios" / "eff-busy", dcgmi=str(tmp_path / "no-such-dcgmi"))
    assert rec["profiling"]["state"] == "unavailable" and "no-such-dcgmi" in rec["profiling"]["why"]
    assert rec["verdict"] == "busy" and all(g["samples"] >= 3 for g in rec["gpus"])
    assert all(g["sm_active_mean"] is None for g in rec["gpus"])


def test_failing_dcgmi_gives_its_message(tmp_path):
    # SYNTHETIC: the message dcgmi prints without a host engine
    scen = _scenario(tmp_path, "dcgmi\tdmon *\terr.txt\t255", {
        "err.txt": "Error: unable to establish a connection to the specified host: localhost\n"})
    rec, _, _ = _run(tmp_path, scen)
    why = rec["profiling"]["why"]
    assert rec["profiling"]["state"] == "unavailable" and "exit 255" in why and "unable to establish" in why
    assert rec["verdict"] == "busy"


def test_hung_dcgmi_is_killed_after_the_start_timeout(tmp_path):
    scen = _scenario(tmp_path, "dcgmi\tdmon *\t@hang")
    rec, _, _ = _run(tmp_path, scen, start_timeout=1.0)
    assert rec["profiling"]["state"] == "unavailable" and "no sample within 1 s" in rec["profiling"]["why"]
    assert rec["verdict"] == "busy"


def _group_members(pgid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    st_ = f.read().rsplit(")", 1)[1].split()
                if int(st_[2]) == pgid and st_[0] != "Z":
                    out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def test_the_epilogs_killpg_ends_dcgmi_with_the_sampler(tmp_path):
    _, out, p = _run(tmp_path, FAKE / "scenarios" / "eff-busy", session=True)
    try:
        members = _group_members(p.pid)
        assert len(members) >= 3, members        # the sampler, nvidia-smi, dcgmi (and their sleeps)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _group_members(p.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group_members(p.pid) == []
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def _cap(util: float, sm: float | None, n: int = 10) -> Capture:
    cap = Capture(format="synthetic")
    g = cap.gpu(2, index=2)
    for i in range(n):
        g.add(t=float(i), util=util, mem_used=1000.0, power=600.0)
        g.add_profile(sm, 30.0, 10.0)
    g.power_limit = 700.0
    return cap


def test_low_sm_finding_fires_on_high_util_low_sm():
    doc = summarize(_cap(97.0, 8.0), Thresholds())
    assert any(f["text"] == "GPU 2: 97% utilisation but 8% SM activity, 30% tensor activity" for f in doc["findings"])
    assert any("busy running little" in s for s in doc["next_steps"])


@pytest.mark.parametrize("util,sm", [(97.0, 60.0), (50.0, 8.0), (97.0, None)])
def test_low_sm_finding_stays_quiet(util, sm):
    doc = summarize(_cap(util, sm), Thresholds())
    assert not any("SM activity" in f["text"] for f in doc["findings"])


def test_thresholds_follow_the_config_and_their_ranges():
    eff = EfficiencySettings(sm_low_active_pct=5.0)
    doc = summarize(_cap(97.0, 8.0), Thresholds.from_settings(eff))
    assert not any("SM activity" in f["text"] for f in doc["findings"])
    for bad in ({"sm_low_active_pct": 150.0}, {"sm_busy_util_pct": 0.0}, {"dcgm_start_timeout": 0.0}):
        with pytest.raises(Exception):
            EfficiencySettings(**bad)


ratio = st.one_of(st.sampled_from(["N/A", "nan", "inf"]), st.floats(0, 1).map(lambda v: f"{v:.3f}"))


@given(st.permutations(list(DCGM_COLS)), st.lists(ratio, min_size=3, max_size=3), st.integers(0, 64))
def test_dcgm_row_reads_by_column_name(cols, cells, gpu):
    got = dcgm_row(["GPU", str(gpu), *cells], cols)
    assert got is not None and got[0] == gpu
    by = dict(zip(cols, cells))
    for name, v in zip(DCGM_COLS, got[1]):
        assert v is None if by[name] in ("N/A", "nan", "inf") else abs(v - float(by[name]) * 100) < 1e-6


@given(st.lists(st.text(max_size=12), max_size=6))
def test_dcgm_row_never_raises(cells):
    got = dcgm_row(cells, list(DCGM_COLS))
    assert got is None or isinstance(got[0], int)


def test_efficiency_jobid_reports_sm_and_tensor_activity(tmp_path):
    rec, _, _ = _run(tmp_path, FAKE / "scenarios" / "eff-hung")
    log = tmp_path / "efficiency.jsonl"
    record.append(str(log), rec, max_bytes=1 << 20)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"efficiency:\n  log: {log}\n")
    env = dict(os.environ, SLURMKIT_CONFIG=str(cfg))
    js, txt = (subprocess.run([sys.executable, "-m", "slurmkit.cli", "efficiency", "91", *a], capture_output=True,
                              text=True, timeout=60, env=env, cwd=str(REPO)) for a in (["--json"], []))
    doc = json.loads(js.stdout)
    assert doc["profiling"]["state"] == "ok"
    assert [g["index"] for g in doc["gpus"]] == [0, 2] and all(g["sm_active_mean"] < 10 for g in doc["gpus"])
    assert any("% SM activity" in f["text"] for f in doc["findings"])
    assert "SM ACT" in txt.stdout and "TENSOR" in txt.stdout and "utilisation but" in txt.stdout, txt.stdout


def test_missing_dcgmi_shows_in_the_text_report(tmp_path):
    rec, _, _ = _run(tmp_path, FAKE / "scenarios" / "eff-busy", dcgmi=str(tmp_path / "no-such-dcgmi"))
    from slurmkit.efficiency.report import text
    out = text({**rec, "job": {"job_id": 91, "node": "n1"}})
    assert "SM ACT" not in out and "SM/tensor activity: unavailable (dcgmi not run" in out


def test_halving_keeps_both_kinds_of_sample(tmp_path):
    from slurmkit.efficiency.sampler import Writer
    p = tmp_path / "s"
    w = Writer(str(p), 64 << 10, {"v": 1, "job_id": 1, "gpus": [0], "interval": 1.0, "start": 0})
    for t in range(6000):
        w.sample([float(t), 0, 50.0, 1000.0, 300.0], True)
        w.sample([float(t) + 0.5, 0, "dcgm", 40.0, 20.0, 10.0], True, kind="dcgm")
    w.close("stopped")
    assert p.stat().st_size < (64 << 10) + 200
    cap, head = record.load_samples(p.read_text())
    g = cap.gpus[0]
    smi = [u for u in g.util if u is not None]
    prof = [s for s in g.dram_active if s is not None]
    assert head["stride"] > 1 and len(smi) > 100 and abs(len(smi) - len(prof)) <= 2


def test_prolog_start_and_epilog_stop_carry_dcgm_into_the_record(tmp_path):
    from slurmkit.efficiency import hooks
    from slurmkit.settings import PathsSettings, Settings, ToolsSettings
    s = Settings(tools=ToolsSettings(nvidia_smi=SMI, dcgmi=DCGMI),
                 paths=PathsSettings(state_dir=str(tmp_path / "state"), health_log=str(tmp_path / "health.jsonl")),
                 efficiency=EfficiencySettings(interval=0.2, log=str(tmp_path / "eff.jsonl"), backend="nvidia-smi",
                                               start_grace=120))
    env = {"SLURM_JOB_ID": "93", "SLURM_JOB_GPUS": "1", "SLURMD_NODENAME": "n1", "PATH": os.environ["PATH"],
           "SLURMKIT_FAKEGPU_SCENARIO": str(FAKE / "scenarios" / "eff-hung")}
    pid = hooks.start(s, env)
    assert pid
    samples = tmp_path / "state" / "efficiency" / "93.n1.samples"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not samples.exists() or samples.read_text().count('"dcgm",') < 4):
        time.sleep(0.1)
    rec = hooks.stop(s, env)
    assert rec["profiling"]["state"] == "ok" and rec["gpus"][0]["index"] == 1
    assert rec["gpus"][0]["sm_active_mean"] < 10 and rec["gpus"][0]["tensor_active_mean"] is not None
    deadline = time.monotonic() + 30
    while _group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_members(pid) == []          # the epilog's killpg: no sampler, nvidia-smi or dcgmi left
