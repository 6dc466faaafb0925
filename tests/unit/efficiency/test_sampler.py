"""The sampler against the fake nvidia-smi (a real child process replaying a series), its watchdog, its size
bound; the job record and the log's bound; MFU; report idle; the hooks' light import path."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, settings, strategies as st

from slurmkit.efficiency import mfu, record
from slurmkit.efficiency.report import idle_report, parse_since, sparkline
from slurmkit.efficiency.sampler import Writer, job_alive
from slurmkit.efficiency.steps import report_step
from slurmkit.efficiency.verdict import Thresholds

REPO = Path(__file__).resolve().parents[3]
FAKE = REPO / "dev" / "fakegpu"


def _fake_proc(root: Path, job_id: int) -> Path:
    d = root / "4242"
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(f"slurmstepd: [{job_id}.batch]".encode() + b"\0")
    return d


def test_sampler_reads_the_series_and_its_watchdog_ends_it(tmp_path):
    procroot = tmp_path / "proc"
    stepd = _fake_proc(procroot, 77)
    out = tmp_path / "77.samples"
    env = dict(os.environ, SLURMKIT_FAKEGPU_SCENARIO=str(FAKE / "scenarios" / "eff-idle1of4"))
    p = subprocess.Popen([sys.executable, "-I", "-m", "slurmkit.efficiency.sampler", "--job", "77", "--gpus", "0,3",
                          "--out", str(out), "--interval", "0.2", "--tool", str(FAKE / "bin" / "nvidia-smi"),
                          "--backend", "nvidia-smi", "--watchdog", "0.2", "--proc-root", str(procroot)],
                         env=env, cwd=str(REPO))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n[") >= 8):
            time.sleep(0.1)
        (stepd / "cmdline").unlink()
        stepd.rmdir()                      # the job is gone
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    cap, head = record.load_samples(out.read_text())
    assert head["job_id"] == 77 and head["gpus"] == [0, 3] and head["end_reason"] == "job gone"
    assert sorted(cap.gpus) == [0, 3]      # only the job's GPUs, though nvidia-smi prints all 8
    assert cap.gpus[3].mem_total == 81559 and cap.gpus[3].power_limit == 700
    assert set(cap.gpus[3].util) == {0.0} and min(cap.gpus[0].util) >= 97
    rec = record.build(cap, head, Thresholds(), environ={"SLURM_JOB_USER": "alice"}, node="n9")
    assert rec["verdict"] == "idle" and rec["user"] == "alice"
    assert [g["state"] for g in rec["gpus"]] == ["busy", "idle"]


def test_sampler_without_its_job_exits_after_the_grace(tmp_path):
    out = tmp_path / "s"
    r = subprocess.run([sys.executable, "-I", "-m", "slurmkit.efficiency.sampler", "--job", "78", "--gpus", "0",
                        "--out", str(out), "--interval", "0.2", "--tool", "/nonexistent/nvidia-smi",
                        "--backend", "nvidia-smi", "--watchdog", "0.1", "--start-grace", "0.5",
                        "--proc-root", str(tmp_path)], timeout=60, cwd=str(REPO))
    assert r.returncode == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert any(x.get("event") == "tool-missing" for x in lines if isinstance(x, dict))


def test_job_alive_reads_stepd_titles(tmp_path):
    _fake_proc(tmp_path, 5)
    assert job_alive(5, str(tmp_path)) and not job_alive(55, str(tmp_path)) and not job_alive(6, str(tmp_path))


def test_writer_stays_bounded(tmp_path):
    p = tmp_path / "s"
    w = Writer(str(p), 64 << 10, {"v": 1, "job_id": 1, "gpus": [0, 1], "interval": 1.0, "start": 0})
    for t in range(20000):
        for g in (0, 1):
            w.sample([float(t), g, 50.0, 1000.0, 300.0], g == 0)
    w.close("stopped")
    assert p.stat().st_size < (64 << 10) + 200
    cap, head = record.load_samples(p.read_text())
    assert head["stride"] > 1 and cap.interval == head["stride"]
    ts = [t for t in cap.gpus[0].t]
    assert len(ts) > 100 and ts == sorted(ts)
    assert ts[-1] > 19000               # the end of the job is still there, at a coarser resolution


def test_log_rotates_at_its_bound(tmp_path):
    log = tmp_path / "efficiency.jsonl"
    for i in range(50):
        record.append(str(log), {"job_id": i, "end": 1.0, "pad": "x" * 100}, max_bytes=2000)
    assert log.stat().st_size <= 2000 + 200 and (tmp_path / "efficiency.jsonl.1").exists()
    ids = [r["job_id"] for r in record.read(str(log))]
    assert ids == sorted(ids) and ids[-1] == 49


def test_hooks_do_nothing_for_cpu_jobs_or_when_disabled(tmp_path):
    from slurmkit.efficiency import hooks
    from slurmkit.settings import Settings
    s = Settings()
    s.efficiency.enabled, s.paths.state_dir = True, str(tmp_path)
    assert hooks.start(s, {"SLURM_JOB_ID": "5"}) is None
    assert hooks.stop(s, {"SLURM_JOB_ID": "5"}) is None
    s.efficiency.enabled = False
    assert hooks.start(s, {"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0"}) is None
    assert not (tmp_path / "efficiency").exists()


def test_hook_modules_stay_light():
    code = ("import sys\nimport slurmkit.efficiency.hooks, slurmkit.efficiency.record, slurmkit.efficiency.sampler, "
            "slurmkit.efficiency.sampler_dcgm, "
            "slurmkit.efficiency.mfu, slurmkit.efficiency.steps\n"
            "print(sorted(m for m in ('click', 'yaml', 'jinja2', 'paramiko', 'ClusterShell') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.stdout.strip() == "[]", r.stderr


# --- MFU ---------------------------------------------------------------------------------------------------------

def test_mfu_from_step_reports(tmp_path):
    steps = [{"t": 0.0, "flops": 4e15}] + [{"t": float(i), "flops": 4e15, "tokens": 1000} for i in range(1, 11)]
    m = mfu.compute(steps, n_gpus=8, gpu_name="NVIDIA H100 80GB HBM3", seconds=None)
    # 10 steps x 4 PFLOP in 10 s = 4 PFLOP/s over 8 x 989.4 TFLOP/s
    assert m["mfu_pct"] == round(100 * 4e15 / (8 * 989.4e12), 2) and "datasheet" in m["peak_source"]
    assert mfu.compute(steps, n_gpus=1, gpu_name="Mystery GPU", seconds=None)["mfu_pct"] is None
    assert mfu.peak_for("NVIDIA H100 PCIe")["bf16_dense_tflops"] == 756.5
    assert mfu.peak_for("NVIDIA A100-SXM4-80GB")["model"] == "A100"


def test_report_step_and_the_epilog_reader(tmp_path):
    assert report_step(1e12, 10, job_id="12", steps_dir=str(tmp_path))
    assert report_step(2e12, job_id="12", steps_dir=str(tmp_path))
    path = mfu.steps_path(12, str(tmp_path))
    steps = mfu.parse_steps(mfu.read_steps_file(path, os.getuid()))
    assert [s["flops"] for s in steps] == [1e12, 2e12] and steps[0]["tokens"] == 10
    assert mfu.read_steps_file(path, os.getuid() + 1) == ""        # not the job's user: ignored
    link = tmp_path / "slurmkit-steps.13"
    link.symlink_to(path)
    assert mfu.read_steps_file(str(link), os.getuid()) == ""        # never through a link
    assert not report_step(1.0, job_id=None) or os.environ.get("SLURM_JOB_ID")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parse_steps_never_crashes(text):
    for s in mfu.parse_steps(text):
        assert s["flops"] >= 0


# --- report idle, sparkline ---------------------------------------------------------------------------------------

def test_idle_report_aggregates_and_prices():
    recs = [{"job_id": 1, "user": "a", "verdict": "idle", "gpu_hours": 4.0, "gpu_hours_by_state": {"idle": 1.0, "busy": 3.0}},
            {"job_id": 2, "user": "a", "verdict": "busy", "gpu_hours": 2.0, "gpu_hours_by_state": {"busy": 2.0}},
            {"job_id": 3, "user": "b", "verdict": "hung", "gpu_hours": 8.0, "gpu_hours_by_state": {"hung": 8.0}}]
    doc = idle_report(recs, by="user", price=2.5)
    g = {x["user"]: x for x in doc["groups"]}
    assert g["a"]["idle_gpu_hours"] == 1.0 and g["a"]["idle_cost"] == 2.5 and g["a"]["jobs"] == 2
    assert g["b"]["hung_gpu_hours"] == 8.0 and g["b"]["idle_cost"] == 20.0
    assert doc["groups"][0]["user"] == "b" and [f["job_id"] for f in doc["findings"]] == [1, 3]
    assert doc["total"]["gpu_hours"] == 14.0


def test_parse_since():
    assert parse_since("7d", 1e6) == 1e6 - 7 * 86400
    assert parse_since("2026-11-24T00:00:00Z", 0) == 1795478400.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0, 100)), max_size=500), st.integers(1, 80))
def test_sparkline(vals, width):
    s = sparkline(vals, width)
    assert len(s) == min(len(vals), width) and set(s) <= set("▁▂▃▄▅▆▇█·")


def test_run_flops_per_step_counts_step_lines(tmp_path):
    """`slurmkit run --flops-per-step N`: stdout passes through unchanged; each SLURMKIT_STEP line is a step."""
    env = {k: v for k, v in os.environ.items() if k != "SLURMKIT_CONFIG"}
    env.update(SLURM_JOB_ID="991", SLURMKIT_STEPS_DIR=str(tmp_path))
    child = ("print('hello'); print('SLURMKIT_STEP tokens=5'); print('[rank0] SLURMKIT_STEP flops=3e12 tokens=7');"
             "print('bye')")
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "run", "--flops-per-step", "2e12", "--", sys.executable,
                        "-c", child], capture_output=True, text=True, timeout=60, env=env, cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["hello", "SLURMKIT_STEP tokens=5", "[rank0] SLURMKIT_STEP flops=3e12 tokens=7",
                                     "bye"]
    steps = mfu.parse_steps((tmp_path / "slurmkit-steps.991").read_text())
    assert [(s["flops"], s["tokens"]) for s in steps] == [(2e12, 5), (3e12, 7)]
    from slurmkit.checkpoint import report_step as re_exported
    assert re_exported is report_step


FAKE_PYNVML = '''"""SYNTHETIC stand-in for nvidia-ml-py's pynvml (same function names and units: mW, bytes), for a machine
without a GPU driver: GPU 0 busy at 650 W, GPU 1 a MIG slice whose utilisation query fails."""
class NVMLError(Exception):
    pass
class _U:
    def __init__(self, g): self.gpu = g
class _M:
    def __init__(self, u, t): self.used, self.total = u, t
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return b"NVIDIA H100 80GB HBM3"
def nvmlDeviceGetUUID(h): return "GPU-fake-%d" % h
def nvmlDeviceGetEnforcedPowerLimit(h): return 700000
def nvmlDeviceGetMemoryInfo(h): return _M(60000 * 2**20, 81559 * 2**20)
def nvmlDeviceGetPowerUsage(h): return 650000
def nvmlDeviceGetUtilizationRates(h):
    if h == 1:
        raise NVMLError("Not Supported")
    return _U(97)
'''


def test_sampler_nvml_loop(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "pynvml.py").write_text(FAKE_PYNVML)
    procroot = tmp_path / "proc"
    stepd = _fake_proc(procroot, 79)
    out = tmp_path / "s"
    code = ("import sys; sys.path.insert(0, %r); from slurmkit.efficiency.sampler import main; "
            "sys.exit(main(sys.argv[1:]))" % str(tmp_path / "lib"))
    p = subprocess.Popen([sys.executable, "-c", code, "--job", "79", "--gpus", "0,1", "--out", str(out),
                          "--interval", "0.1", "--backend", "auto", "--watchdog", "0.1",
                          "--proc-root", str(procroot)], cwd=str(REPO))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n[") >= 6):
            time.sleep(0.1)
        (stepd / "cmdline").unlink()
        stepd.rmdir()
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    cap, head = record.load_samples(out.read_text())
    assert head["backend"] == "nvml" and head["end_reason"] == "job gone"
    assert set(cap.gpus[0].util) == {97} and cap.gpus[0].power_limit == 700 and cap.gpus[0].power[0] == 650
    assert cap.gpus[0].name == "NVIDIA H100 80GB HBM3" and cap.gpus[0].mem_used[0] == 60000
    assert set(cap.gpus[1].util) == {None}        # MIG: no utilisation -> unknown, not 0 %
    rec = record.build(cap, head, Thresholds(), environ={}, node="n1")
    assert [g["state"] for g in rec["gpus"]] == ["busy", "unknown"]


def test_auto_backend_falls_back_without_a_driver():
    """The real nvidia-ml-py (where installed) on a machine without NVIDIA's driver: auto means nvidia-smi."""
    import pytest
    pytest.importorskip("pynvml")
    from slurmkit.efficiency.sampler import nvml_available
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    assert nvml_available() is False


def test_report_idle_runs_the_site_command_only_when_asked(tmp_path):
    log = tmp_path / "efficiency.jsonl"
    now = time.time()
    for jid, verdict in ((7, "idle"), (8, "busy")):
        record.append(str(log), {"job_id": jid, "user": "bob", "node": "n1", "end": now, "verdict": verdict,
                                 "gpu_hours": 2.0, "gpu_hours_by_state": {verdict: 2.0}}, max_bytes=1 << 20)
    marks = tmp_path / "marks"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"audit:\n  price_per_gpu_hour: 3\nefficiency:\n  log: {log}\n  idle_command: "
                   f"[/bin/sh, -c, 'echo \"$0 $1\" >> {marks}', '{{job_id}}', '{{user}} {{verdict}}']\n")
    env = dict(os.environ, SLURMKIT_CONFIG=str(cfg))

    def run(*a):
        return subprocess.run([sys.executable, "-m", "slurmkit.cli", "report", "idle", *a], capture_output=True,
                              text=True, timeout=60, env=env, cwd=str(REPO))
    r = run("--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["total"]["idle_cost"] == 6.0 and not marks.exists()   # nothing sent
    r = run("--run-command", "--dry-run")
    assert "would run: /bin/sh -c" in r.stderr and "'bob idle'" in r.stderr and not marks.exists()
    r = run("--run-command", "--json")
    assert marks.read_text() == "7 bob idle\n"           # once, for the idle job only; placeholders one argument each
    assert json.loads(r.stdout)["commands"][0]["returncode"] == 0
