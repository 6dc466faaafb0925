"""nvlink and gpu_procs verdicts, the runner (timeouts, fail-closed, budget), `slurmkit check`, the prolog's
light import path, and drain reasons."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import config, drain
from slurmkit.health.runner import parse_gpu_list, run_checks

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures"
SCEN = REPO / "dev" / "fakegpu" / "scenarios"
FAKE = REPO / "dev" / "fakegpu" / "bin"

NVLINK = {
    "dcgm/gb200-nvlink-info-nvle-firmware-gpu0-1.txt": "ok",       # firmware info, no link lines
    "dcgm/gb200-nvlink-s-gpu0-18-links-53GBps.txt": "ok",
    "dcgm/h100x8-dcgmi-nvlink-s-all-up-no-nvswitch-visible.txt": "ok",
    "dcgm/h800x8-nvlink-status-8-links-26.562-elided.txt": "ok",
    "dcgm/meta-gcm-htc-dcgmi-nvlink-e-g0-head9.txt": "ok",          # error counters all 0
    "dcgm/meta-gcm-htc-dcgmi-nvlink-s-8gpu-12links-a100.txt": "ok",
    "dcgm/v100-sxm2-nvlink-s-two-links-inactive-excerpt.txt": "fail",   # Link 3 and 5 <inactive>
}


def settings(tmp_path, scenario="healthy-h100x8", **health):
    s = config.Settings()
    s.tools.nvidia_smi = str(FAKE / "nvidia-smi")
    s.tools.dmesg = str(FAKE / "dmesg")
    s.tools.all_reduce_perf = str(FAKE / "all_reduce_perf")
    s.paths.state_dir = str(tmp_path / "state")
    s.paths.health_log = str(tmp_path / "health.jsonl")
    s.gpu_count.expected = 8
    for k, v in health.items():
        setattr(s.health, k, v)
    os.environ["SLURMKIT_FAKEGPU_SCENARIO"] = str(SCEN / scenario)
    return s


@pytest.fixture(autouse=True)
def _restore_env():
    old = os.environ.get("SLURMKIT_FAKEGPU_SCENARIO")
    yield
    if old is None:
        os.environ.pop("SLURMKIT_FAKEGPU_SCENARIO", None)
    else:
        os.environ["SLURMKIT_FAKEGPU_SCENARIO"] = old


@pytest.mark.parametrize("name", sorted(NVLINK))
def test_nvlink_fixture(name):
    (r,) = run_checks(config.Settings(), "full", captures={"nvlink": (FIX / name).read_text()}).results
    assert r.status == NVLINK[name], r.reason
    if r.status == "fail":
        assert r.reason == "GPU 3: link 3 inactive, 5 inactive"


def test_nvlink_error_counters_over_threshold():
    # SYNTHETIC counters in the `nvidia-smi nvlink -e` layout
    from slurmkit.health.checks import nvlink
    s = config.Settings().nvlink
    text = "GPU 0: NVIDIA H100 (UUID: GPU-x)\n\t Link 0: Replay Errors: 5\n\t Link 1: CRC Errors: 4000\n"
    r = nvlink.evaluate("GPU 0: NVIDIA H100 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n", text, s)
    assert r.status == "fail" and "link 1 CRC Errors=4000" in r.reason


def _h100_pcie_links(inactive: int) -> str:
    """SYNTHETIC: `nvidia-smi nvlink -s` of two H100 PCIe GPUs listing 18 links, links 12-17 of GPU 0 and the first
    `inactive` of those of GPU 1 inactive (the layout of the real GB200 and V100 captures)."""
    out = ""
    for g in (0, 1):
        out += f"GPU {g}: NVIDIA H100 PCIe (UUID: GPU-{g})\n"
        for n in range(18):
            v = "26.562 GB/s"
            if n >= 12 and (g == 0 or n < 12 + inactive):
                v = "<inactive>"
            out += f"\t Link {n}: {v}\n"
    return out


def test_links_inactive_by_design_pass_and_one_more_fails():
    # AzNHC issue 162: an H100 PCIe lists 18 links and uses 12; as shipped, every such node failed every run
    judge = lambda text, yaml: run_checks(config.loads(yaml, "site.yaml"), "full",  # noqa: E731
                                          captures={"nvlink": text}).results[0]
    site = "nvlink:\n  inactive_by_design: {NVIDIA H100 PCIe: 6}\n"
    r = judge(_h100_pcie_links(6), site)
    assert r.status == "ok" and r.reason == "24 NVLink links up on 2 GPUs, 12 inactive by design", r.reason
    assert r.evidence["inactive_by_design"] == {"0": 6, "1": 6}
    assert judge(_h100_pcie_links(6), "{}\n").status == "fail"          # not configured: as before
    # a 7th inactive link is still a finding, with what the site allows said beside it
    text = _h100_pcie_links(6).replace("Link 11: 26.562 GB/s", "Link 11: <inactive>")
    r = judge(text, site)
    assert r.status == "fail" and r.reason.startswith("GPU 0: link 11 inactive, 12 inactive"), r.reason
    assert r.reason.endswith("(6 inactive by design for NVIDIA H100 PCIe)")
    # a node class through "*" (per-node overrides select it); the model's own entry wins; names are case-blind
    assert judge(_h100_pcie_links(6), "nvlink:\n  inactive_by_design: {'*': 6}\n").status == "ok"
    assert judge(_h100_pcie_links(6), "nvlink:\n  inactive_by_design: {'*': 6, nvidia h100 pcie: 0}\n").status \
        == "fail"


def test_gpu_procs_only_judges_the_jobs_gpus():
    # SYNTHETIC: the healthy scenario's -q with a python process left on GPU 3
    text = (SCEN / "healthy-h100x8" / "nvidia-smi-q.txt").read_text()
    blocks = text.split("GPU 00000000:")
    blocks[4] = blocks[4].replace(
        "    Processes                             : None",
        "    Processes\n        GPU instance ID                   : N/A\n        Compute instance ID               : N/A\n"
        "        Process ID                        : 4242\n            Type                          : C\n"
        "            Name                          : python\n            Used GPU Memory               : 30000 MiB")
    text = "GPU 00000000:".join(blocks)
    s = config.Settings()
    (r,) = run_checks(s, "full", captures={"gpu_procs": text}, job_gpus=[3]).results
    assert r.status == "fail" and "pid 4242 (python)" in r.reason and r.evidence["gpus"][0]["gpu"] == 3
    (r,) = run_checks(s, "full", captures={"gpu_procs": text}, job_gpus=[0, 1]).results
    assert r.status == "ok"


def test_gpu_procs_follows_minor_numbers_and_cpu_jobs_judge_no_gpu():
    # SYNTHETIC: the healthy -q with GPU 0's block carrying minor number 5 and a process
    from slurmkit.hooks.common import job_gpus
    text = (SCEN / "healthy-h100x8" / "nvidia-smi-q.txt").read_text()
    blocks = text.split("GPU 00000000:")
    blocks[1] = blocks[1].replace("Minor Number                          : 0", "Minor Number                          : 5") \
        .replace("    Processes                             : None",
                 "    Processes\n        Process ID                        : 99\n            Name                          : "
                 "stuck")
    blocks[6] = blocks[6].replace("Minor Number                          : 5", "Minor Number                          : 0")
    text = "GPU 00000000:".join(blocks)
    s = config.Settings()
    (r,) = run_checks(s, "full", captures={"gpu_procs": text}, job_gpus=[5]).results
    assert r.status == "fail" and r.reason.startswith("left on the GPU: GPU 5 (0000:18:00): pid 99")
    (r,) = run_checks(s, "full", captures={"gpu_procs": text}, job_gpus=[0]).results
    assert r.status == "ok"
    assert job_gpus({"SLURM_JOB_GPUS": "", "CUDA_VISIBLE_DEVICES": ""}) == [] and job_gpus({}) == []
    assert job_gpus({"SLURM_JOB_GPUS": "2,3"}) == [2, 3] and job_gpus({"CUDA_VISIBLE_DEVICES": "1"}) == [1]
    (r,) = run_checks(s, "full", captures={"gpu_procs": text}, job_gpus=job_gpus({})).results
    assert r.status == "ok"


def test_parse_gpu_list():
    assert parse_gpu_list("0,1,3") == [0, 1, 3]
    assert parse_gpu_list("0-2,5") == [0, 1, 2, 5]
    assert parse_gpu_list("") is None and parse_gpu_list(None) is None


def test_healthy_scenario_is_healthy(tmp_path):
    s = settings(tmp_path)
    s.driver.driver_versions = ["550.54.15"]
    rep = run_checks(s, "full", node="n1")
    assert rep.healthy, rep.to_dict()
    assert {r.check: r.status for r in rep.results} == {
        "xid": "ok", "gpu_count": "ok", "ecc": "ok", "recovery": "ok", "driver": "ok", "pcie": "ok", "clocks": "ok",
        "fabric": "ok", "ib": "skip", "temperature": "ok", "vbios": "ok",
        "gpu_config": "ok", "nvlink": "ok", "gpu_procs": "ok", "dstate": "ok", "nccl": "skip"}


def test_hung_nvidia_smi_fails_within_its_timeout(tmp_path):
    s = settings(tmp_path, "hang", command_timeout=0.5)
    t0 = time.monotonic()
    rep = run_checks(s, "prolog", node="n1")
    took = time.monotonic() - t0
    by = {r.check: r for r in rep.results}
    assert not rep.healthy
    assert by["gpu_count"].status == "fail" and "timed out after 0.5s" in by["gpu_count"].reason
    assert by["ecc"].status == "fail"          # the same hung call is not waited for twice
    assert by["xid"].status == "ok"            # dmesg still answers
    assert took < 0.5 * 2 + 1.5 + 1.0          # one timeout (+ kill grace), not one per check
    s = settings(tmp_path, "hang", command_timeout=0.5, fail_closed=False)
    assert run_checks(s, "prolog", only=["gpu_count"], node="n1").results[0].status == "warn"


def test_missing_tool_fails_closed(tmp_path):
    s = settings(tmp_path)
    s.tools.nvidia_smi = str(tmp_path / "no-such-nvidia-smi")
    (r,) = run_checks(s, "prolog", only=["ecc"], node="n1").results
    assert r.status == "fail" and "not found" in r.reason


def test_an_unreadable_kernel_log_is_not_a_clean_one(tmp_path):
    s = settings(tmp_path)
    tool = tmp_path / "dmesg"
    tool.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    tool.chmod(0o755)
    s.tools.dmesg = str(tool)
    (r,) = run_checks(s, "full", only=["xid"], node="n1").results
    assert r.status == "fail" and "Operation not permitted" in r.reason


def test_budget_spent_fails_the_rest(tmp_path):
    s = settings(tmp_path, "hang", command_timeout=0.3, budget_seconds=0.1)
    rep = run_checks(s, "prolog", node="n1")
    assert any("budget" in r.reason for r in rep.results)


def test_nccl_on_demand_then_cached_for_the_prolog(tmp_path):
    s = settings(tmp_path)
    s.nccl.expected_busbw_gbps = 90
    assert run_checks(s, "prolog", only=None, node="n1").results[-1].status == "skip"
    (r,) = run_checks(s, "full", only=["nccl"], node="n1").results
    assert r.status == "ok" and r.evidence["avg_bus_bandwidth_gbps"] == 91.019
    r = [x for x in run_checks(s, "prolog", node="n1").results if x.check == "nccl"][0]
    assert r.status == "ok" and r.reason.startswith("cached:")
    s.nccl.expected_busbw_gbps = 200                            # the profile now expects more: fails, cached
    assert run_checks(s, "full", only=["nccl"], node="n1").results[0].status == "fail"
    r = [x for x in run_checks(s, "prolog", node="n1").results if x.check == "nccl"][0]
    assert (r.status, r.code) == ("fail", "nccl")
    s.nccl.ttl_seconds = 0
    time.sleep(0.01)
    r = [x for x in run_checks(s, "prolog", node="n1").results if x.check == "nccl"][0]
    assert r.status == "skip" and "old" in r.reason


def test_drain_reasons():
    s = config.Settings()
    assert drain.reason_for(s, "xid79", "GPU 0000:3b:00 fell off the bus") == \
        "slurmkit:xid79 GPU 0000:3b:00 fell off the bus"
    assert drain.is_slurmkit_reason("slurmkit:ecc GPU 0000:10:1c: row remapping pending", s)
    assert not drain.is_slurmkit_reason("admin: PSU swap ticket 4411", s)
    assert not drain.is_slurmkit_reason("Prolog error", s) and not drain.is_slurmkit_reason("", s)
    assert len(drain.reason_for(s, "ecc", "x" * 500)) == drain.MAX_REASON
    assert drain.check_of_reason("slurmkit:xid79 GPU 0000:3b:00 fell off the bus", s) == "xid"
    assert drain.check_of_reason("slurmkit:sxid20034 NVSwitch", s) == "xid"
    assert drain.check_of_reason("slurmkit:gpu_procs left on the GPU", s) == "gpu_procs"
    assert drain.check_of_reason("admin: PSU swap", s) is None
    with pytest.raises(ValueError):
        drain.drain_node(s, "n1", "admin reason", backend=object())


# --- the command and the hooks, as processes ---------------------------------------------------------------

def write_config(tmp_path):
    p = tmp_path / "slurmkit.yaml"
    p.write_text(f"""tools:
  nvidia_smi: {FAKE}/nvidia-smi
  dmesg: {FAKE}/dmesg
  all_reduce_perf: {FAKE}/all_reduce_perf
paths:
  state_dir: {tmp_path}/state
  health_log: {tmp_path}/health.jsonl
gpu_count:
  expected: 8
health:
  drain: false
  command_timeout: 1
""")
    return p


def cli(tmp_path, scenario, *args, env=None):
    e = dict(os.environ, SLURMKIT_CONFIG=str(write_config(tmp_path)),
             SLURMKIT_FAKEGPU_SCENARIO=str(SCEN / scenario), **(env or {}))
    return subprocess.run([sys.executable, "-m", "slurmkit.cli", *args], capture_output=True, text=True,
                          env=e, timeout=60)


def test_check_command_exit_codes_and_json(tmp_path):
    r = cli(tmp_path, "healthy-h100x8", "check", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["healthy"] is True and set(doc) == {"node", "healthy", "results", "gpu_source"}
    # the fake tools are the site's own nvidia-smi here: read through it, never through NVML (health.gpu_source auto)
    assert doc["gpu_source"] == {"source": "nvidia-smi", "nvml": "not read: tools.nvidia_smi names the site's own tool"}
    assert set(doc["results"][0]) == {"check", "status", "reason", "evidence"}
    r = cli(tmp_path, "xid79", "check", "--only", "xid")
    assert r.returncode == 1 and "GPU 0000:5d:00 fell off the bus" in r.stdout
    r = cli(tmp_path, "healthy-h100x8", "check", "--json", "--capture",
            f"nccl={FIX}/nccl/azure-ndh200v5-8xh200-mpirun-np8-all-reduce-8G-only.txt", "--capture",
            f"xid={FIX}/xid/h100-dmesg-xid48-63-94-dbe-contained.txt")
    doc = json.loads(r.stdout)
    assert r.returncode == 1
    by = {x["check"]: x for x in doc["results"]}
    assert by["nccl"]["evidence"]["avg_bus_bandwidth_gbps"] == 476.967 and by["xid"]["status"] == "fail"
    r = cli(tmp_path, "healthy-h100x8", "check", "--capture", f"ecc={FIX}/nccl/aws-p4de-2node-all_reduce_perf-"
            "srun-label-prefix-awsome.txt")
    assert r.returncode == 2 and "aws-p4de" in r.stderr and "Traceback" not in r.stderr
    assert cli(tmp_path, "healthy-h100x8", "check", "--capture", "ecc").returncode == 2
    assert cli(tmp_path, "healthy-h100x8", "check", "--only", "nope").returncode == 2


def hook(tmp_path, which, scenario, **env):
    e = {"SLURMKIT_CONFIG": str(write_config(tmp_path)), "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN / scenario),
         "SLURMD_NODENAME": "n7", "SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "0,1",
         "SLURMKIT_PYTHON": sys.executable, **env}     # no PATH, as slurmd runs it
    return subprocess.run([str(REPO / which / which)], capture_output=True, text=True, env=e, timeout=60)


def test_prolog_script_runs_without_path_and_logs_every_verdict(tmp_path):
    r = hook(tmp_path, "prolog", "healthy-h100x8")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert {x["check"] for x in recs} == {"xid", "gpu_count", "ecc", "recovery", "driver", "pcie", "clocks", "fabric", "ib", "temperature", "vbios",
                                             "gpu_config", "gpu_procs", "nccl",
                                             "dcgm"}
    assert all(x["context"] == "prolog" and x["job_id"] == 77 and x["node"] == "n7" for x in recs)
    r = hook(tmp_path, "prolog", "xid79")
    assert r.returncode == 1 and "slurmkit:xid79 GPU 0000:5d:00 fell off the bus" in r.stderr
    bad = [json.loads(x) for x in (tmp_path / "health.jsonl").read_text().splitlines()][len(recs):]
    x = next(x for x in bad if x["status"] == "fail")
    assert x["check"] == "xid" and "Xid (PCI:0000:5d:00): 79" in x["evidence"]["line"]
    assert x["action"] == "not-drained (health.drain is false)"


def test_epilog_without_sync_configured_only_checks(tmp_path):
    r = hook(tmp_path, "epilog", "healthy-h100x8")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [x["check"] for x in recs] == ["xid", "ecc", "gpu_procs", "dstate", "straggler"]


def test_prolog_imports_nothing_heavy(tmp_path):
    e = dict(os.environ, SLURMKIT_CONFIG=str(write_config(tmp_path)),
             SLURMKIT_FAKEGPU_SCENARIO=str(SCEN / "healthy-h100x8"), SLURMD_NODENAME="n7")
    code = ("import sys, runpy\nsys.argv=['prolog']\ntry:\n    runpy.run_module('slurmkit.hooks.prolog', "
            "run_name='__main__')\nexcept SystemExit:\n    pass\nprint(sorted(m for m in ('click', 'jinja2', "
            "'paramiko', 'ClusterShell', 'ahocorasick_rs') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr


def fake_sync_site(tmp_path, monkeypatch, sync_for_job, source_tail):
    """A stand-in sync module, an uncached site config syncing SOURCE tmp_path/src/<source_tail>, job 9's env."""
    import types
    fake = types.ModuleType("slurmkit.checkpoint.sync")
    fake.sync_for_job = sync_for_job
    monkeypatch.setitem(sys.modules, "slurmkit.checkpoint.sync", fake)
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text() + f"sync:\n  enabled: true\n  source: {tmp_path}/src/{source_tail}\n"
                                     f"  dest: {tmp_path}/dst/$SLURM_JOB_ID\n")
    for k, v in {"SLURMKIT_CONFIG": str(cfg), "SLURMD_NODENAME": "n7", "SLURM_JOB_ID": "9",
                 "SLURM_JOB_GPUS": "0", "SLURMKIT_FAKEGPU_SCENARIO": str(SCEN / "healthy-h100x8")}.items():
        monkeypatch.setenv(k, v)
    return cfg


def test_epilog_call_point_runs_the_sync_first_and_survives_its_failure(tmp_path, monkeypatch):
    # The call point's contract, with a stand-in sync module: called first, with the hook's (cached) settings;
    # an exception escaping it is logged and the verdict still runs.
    # (The real sync inside the real epilog on the real cluster: tests/integration/test_epilog_sync.py.)
    from slurmkit.hooks import epilog
    calls = []

    def sync_for_job(settings, environ):
        calls.append((type(settings).__name__, environ["SLURM_JOB_ID"]))
        from slurmkit import healthlog
        healthlog.append(settings.paths.health_log, healthlog.record(check="checkpoint-sync", status="ok",
                                                                     context="sync", action="copied"))
        if environ.get("BREAK"):
            raise OSError("bucket unreachable")
        return {"status": "ok"}
    fake_sync_site(tmp_path, monkeypatch, sync_for_job, "$SLURM_JOB_ID")
    (tmp_path / "src" / "9").mkdir(parents=True)   # the job's SOURCE exists: the sync runs
    assert epilog.main() == 0
    monkeypatch.setenv("BREAK", "1")
    assert epilog.main() == 0                      # a failed sync does not stop the verdict (nor fail the node)
    recs = [json.loads(x) for x in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert [r["check"] for r in recs] == (["checkpoint-sync", "xid", "ecc", "gpu_procs", "dstate", "straggler"]
                                          + ["checkpoint-sync", "checkpoint-sync", "xid", "ecc", "gpu_procs", "dstate", "straggler"])
    assert recs[7]["status"] == "fail" and "bucket unreachable" in recs[7]["reason"]
    assert [c[1] for c in calls] == ["9", "9"]


def test_epilog_runs_no_sync_for_a_job_without_a_source_but_does_behind_a_link(tmp_path, monkeypatch):
    # Most jobs write no checkpoints: with no SOURCE the epilog neither imports nor runs the sync, logs no sync
    # record (as the sync's own "nothing"), and drops the prolog's record of the job. A link on the way is not
    # followed as root: the sync (as the job's user) decides.
    from slurmkit.checkpoint import jobstate
    from slurmkit.hooks import epilog
    calls = []
    cfg = fake_sync_site(tmp_path, monkeypatch, lambda settings, environ: calls.append(environ["SLURM_JOB_ID"]),
                         "$SLURM_JOB_ID/ckpt")
    s = config.load(str(cfg))
    rec = tmp_path / "state" / jobstate.DIRNAME / "9.json"
    rec.parent.mkdir(parents=True, mode=0o700)
    rec.write_text('{"job_id": "9", "vars": {}}')
    assert epilog.main() == 0
    assert calls == [] and not rec.exists()
    assert "checkpoint-sync" not in [json.loads(x)["check"] for x in (tmp_path / "health.jsonl").read_text().splitlines()]
    assert s.sync.enabled
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "9").symlink_to(elsewhere)      # ckpt is missing behind the link: not ours to decide
    assert epilog.main() == 0
    assert calls == ["9"]


def test_a_pending_drain_record_that_cannot_be_read_is_still_a_pending_drain(tmp_path):
    """Fail closed: a garbled or foreign pending-drain record never lets the next hook pass the node."""
    s = config.Settings()
    s.paths.state_dir = str(tmp_path)
    assert drain.read_pending(s, "n1") is None
    p = tmp_path / "pending-drain-n1.json"
    for text in ("{not json", '{"reason": "admin: not ours"}', "[]"):
        p.write_text(text)
        rec = drain.read_pending(s, "n1")
        assert rec is not None and rec["reason"].startswith("slurmkit:pending unreadable"), text
    p.write_text('{"reason": "slurmkit:xid79 GPU 0000:5d:00 fell off the bus", "check": "xid"}')
    assert drain.read_pending(s, "n1")["check"] == "xid"
    drain.clear_pending(s, "n1")
    assert drain.read_pending(s, "n1") is None
