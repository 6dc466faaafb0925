"""health.gpu_source (issue 32's NVML backend): every check that reads `nvidia-smi -q` run both ways on NVIDIA's
mock NVML (../shared/tools/nvml-mock), as a user runs it: `slurmkit check --json` once with `gpu_source: nvml`
(nvidia-ml-py in process over the mock libnvidia-ml) and once with `gpu_source: nvidia-smi` (NVIDIA's real 535
binary over the same library and the same node state), each fault injected with the real nvml-mock-ctl.

Where the two ways cannot agree, the test says so and why:
- the 535 binary's full `-q` crashes over the mock (its IBMNPU section, dev/fakegpu/bin/fake-tool), so `-q` is its
  `-q -d` of the checks' sections, which has no PCI section: pcie is compared against the same binary's
  `--query-gpu=pcie.link.*` CSV, judged by the same check (`--capture pcie=`);
- 535 prints no Fabric section: through nvidia-smi the fabric check can only skip (never ok); NVML is the only
  live source of a fabric fault there;
- the mock's uncorrectable ECC counters grow on every read, so the two reasons name different counts: the
  verdicts and the GPU named are compared, the figures are not.

Each run is a subprocess: the dynamic loader reads LD_LIBRARY_PATH at process start, and the mock reads its
profile at nvmlInit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "dev"))
import fakenvml  # noqa: E402

MISSING = fakenvml.available()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
try:
    import pynvml  # noqa: F401
except ImportError:
    pytestmark = pytest.mark.skip(reason="nvidia-ml-py is not installed (the test extra has it)")

MOCK = fakenvml.MOCK
GPU_CHECKS = "gpu_count,ecc,recovery,driver,pcie,clocks,fabric,gpu_procs"
# the -q sections the checks read that the 535 binary prints over the mock without crashing (fake-tool's list)
Q_SECTIONS = "MEMORY,ECC,PIDS,PERFORMANCE,ROW_REMAPPER,PAGE_RETIREMENT,RESET_STATUS,CLOCK"
PCIE_CSV = "pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.width.current,pcie.link.width.max"


class Node:
    """One fake node: its overrides file (its GPUs' state) and the two configs."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.overrides = tmp / "overrides.yaml"
        smi = tmp / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n"
            f'if [ "$*" = "-q" ]; then exec {fakenvml.CACHE}/nvidia-smi -q -d {Q_SECTIONS}; fi\n'
            f'exec {fakenvml.CACHE}/nvidia-smi "$@"\n'
        )
        smi.chmod(0o755)
        self.smi = smi

    def env(self, overrides: Path | None = None) -> dict:
        lib = str(MOCK / "lib")
        return dict(
            os.environ,
            PATH=f"{self.tmp}:{os.environ.get('PATH', '/usr/bin:/bin')}",  # the default tools.nvidia_smi finds it
            LD_LIBRARY_PATH=lib,
            MOCK_NVML_CONFIG=str(MOCK / "configs" / "mock-nvml-config-h100.yaml"),
            MOCK_NVML_OVERRIDES=str(overrides or self.overrides),
        )

    def ctl(self, *args: str) -> None:
        r = subprocess.run([str(MOCK / "bin" / "nvml-mock-ctl"), *args], env=self.env(), capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr

    def config(self, source: str, extra: str = "", smi: str | None = None) -> Path:
        cfg = self.tmp / f"{source}.yaml"
        tools = f"tools:\n  nvidia_smi: {smi}\n" if smi else ""
        cfg.write_text(f"{tools}health:\n  gpu_source: {source}\n{extra}")
        return cfg

    def check(self, source: str, only: str = GPU_CHECKS, *, env=None, extra: str = "", smi=None, args=()) -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "slurmkit.cli", "check", "--only", only, "--json", *args],
            env=dict(env or self.env(), SLURMKIT_CONFIG=str(self.config(source, extra, smi))),
            capture_output=True, text=True, timeout=120, cwd=str(REPO),
        )
        assert r.returncode in (0, 1), r.stderr
        doc = json.loads(r.stdout)
        doc["rc"] = r.returncode
        doc["by"] = {x["check"]: x for x in doc["results"]}
        return doc

    def pcie_csv(self) -> dict:
        """The pcie check on the 535 binary's own pcie.link.* CSV (its -q over the mock has no PCI section)."""
        out = subprocess.run([str(self.smi), f"--query-gpu={PCIE_CSV}", "--format=csv"], env=self.env(),
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        cap = self.tmp / "pcie.csv"
        cap.write_text(out.stdout)
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "check", "--capture", f"pcie={cap}", "--json"],
                           env=self.env(), capture_output=True, text=True, timeout=60, cwd=str(REPO))
        return json.loads(r.stdout)["results"][0]


def _figures(reason: str) -> str:
    return re.sub(r"\b\d+ (volatile|aggregate)", r"N \1", reason)


def _short_bus(reason: str) -> str:
    """The CSV names a GPU by its full bus id, the -q path by the kernel's short form: one form to compare."""
    return re.sub(r"0000([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.0", lambda m: m.group(1).lower(), reason)


def both(node: Node) -> tuple[dict, dict]:
    via_nvml, via_smi = node.check("nvml"), node.check("nvidia-smi")
    assert via_nvml["gpu_source"] == {"source": "nvml"}
    assert via_smi["gpu_source"] == {"source": "nvidia-smi"}
    # the checks whose input both ways print: the same verdict, the same reason (ECC counts aside)
    for name in ("gpu_count", "ecc", "driver", "clocks", "gpu_procs"):
        a, b = via_nvml["by"][name], via_smi["by"][name]
        assert (a["status"], _figures(a["reason"])) == (b["status"], _figures(b["reason"])), name
    # neither way reads a recovery action on this driver (535 has no such field; the mock answers NOT_SUPPORTED)
    assert via_nvml["by"]["recovery"]["status"] == via_smi["by"]["recovery"]["status"] == "skip"
    # pcie: NVML's verdict is the 535 binary's own, read from its CSV
    csv = node.pcie_csv()
    assert (via_nvml["by"]["pcie"]["status"], via_nvml["by"]["pcie"]["reason"]) == (csv["status"], _short_bus(csv["reason"]))
    assert via_smi["by"]["pcie"]["status"] == "skip"
    # fabric: 535 prints no Fabric section, so through nvidia-smi it is unreadable (a skip, never ok)
    assert via_smi["by"]["fabric"]["status"] == "skip" and "535 prints none" in via_smi["by"]["fabric"]["reason"]
    assert via_nvml["rc"] == via_smi["rc"] or via_nvml["by"]["fabric"]["status"] == "fail"
    return via_nvml, via_smi


def test_a_healthy_node_reads_the_same_both_ways(tmp_path):
    a, b = both(Node(tmp_path))
    assert a["healthy"] and b["healthy"]
    assert a["by"]["gpu_count"]["reason"] == "8 GPUs visible (no expected count configured)"
    assert a["by"]["pcie"]["reason"] == "8 GPU links at their max width"
    # the live fabric only NVML shows on this driver: 8 GPUs trained, healthy
    assert (a["by"]["fabric"]["status"], a["by"]["fabric"]["reason"]) == (
        "ok", "8 GPUs: NVLink fabric Completed, Success")


def test_a_gpu_fallen_off_the_bus_fails_the_same_both_ways(tmp_path):
    node = Node(tmp_path)
    node.ctl("fail", "--gpu", "3", "--mode", "fallen_off_bus")
    a, b = both(node)
    assert a["by"]["gpu_count"]["status"] == "fail"
    assert a["by"]["gpu_count"]["reason"].startswith("GPU 00000000:4B:00.0 is lost (nvidia-smi reads 'GPU is lost')")
    assert not a["healthy"] and not b["healthy"]


def test_uncorrectable_ecc_fails_the_same_gpu_both_ways(tmp_path):
    node = Node(tmp_path)
    node.ctl("fail", "--gpu", "1", "--mode", "ecc_uncorrectable", "--xid", "48")
    a, _ = both(node)
    assert a["by"]["ecc"]["status"] == "fail"
    assert re.match(r"GPU 0000:1b:00: \d+ volatile uncorrectable ECC errors", a["by"]["ecc"]["reason"])


def test_sram_parity_errors_fail_both_ways(tmp_path):
    node = Node(tmp_path)
    node.ctl("sram-ecc", "--gpu", "2", "5", "--type", "parity")
    a, _ = both(node)
    assert a["by"]["ecc"]["reason"].startswith("GPU 0000:4a:00: 5 volatile uncorrectable ECC errors")


def test_a_throttled_gpu_fails_the_same_both_ways(tmp_path):
    node = Node(tmp_path)
    node.ctl("throttle", "--gpu", "5", "hw_slowdown", "hw_thermal_slowdown")
    a, _ = both(node)
    assert a["by"]["clocks"]["reason"] == (
        "GPU 0000:8b:00: HW Slowdown, HW Thermal Slowdown active (the hardware holds the clocks down)")


def test_a_downtrained_link_and_memory_left_behind_read_the_same(tmp_path):
    node = Node(tmp_path)
    node.ctl("set", "--gpu", "2", "pcie.current_link_width=8")
    node.ctl("set", "--gpu", "4", "memory.used_bytes=4294967296")
    a, _ = both(node)
    assert a["by"]["pcie"]["reason"] == "GPU 0000:4a:00: link width x8 (max x16)"
    assert a["by"]["gpu_procs"]["reason"] == "left on the GPU: GPU 4 (0000:8a:00): 4096 MiB used with no process"


def test_a_fabric_fault_is_seen_only_through_nvml_on_the_535_driver(tmp_path):
    node = Node(tmp_path)
    node.ctl("fabric-health", "--gpu", "6", "route_unhealthy", "degraded_bandwidth")
    a, b = both(node)
    assert a["by"]["fabric"]["status"] == "fail"
    assert a["by"]["fabric"]["reason"] == (
        "GPU 0000:ca:00: fabric health Unhealthy; Route Unhealthy (NVLink fabric)")
    assert b["healthy"] and not a["healthy"]  # the 535 binary cannot show it


def test_a_site_nvidia_smi_is_read_through_in_auto(tmp_path):
    """tools.nvidia_smi set (a wrapper, a container, the fake GPU tools on a trial node): auto reads through it."""
    node = Node(tmp_path)
    node.ctl("throttle", "--gpu", "5", "hw_slowdown")
    doc = node.check("auto", only="clocks,fabric", smi=str(node.smi))
    assert doc["gpu_source"] == {"source": "nvidia-smi", "nvml": "not read: tools.nvidia_smi names the site's own tool"}
    assert doc["by"]["clocks"]["status"] == "fail" and doc["by"]["fabric"]["status"] == "skip"
    doc = node.check("auto", only="clocks,fabric")  # the default nvidia-smi: NVML, where it loads
    assert doc["gpu_source"] == {"source": "nvml"} and doc["by"]["fabric"]["status"] == "ok"


def test_without_the_library_auto_reads_nvidia_smi_and_says_why_and_nvml_alone_fails(tmp_path):
    node = Node(tmp_path)
    env = {k: v for k, v in node.env().items() if k != "LD_LIBRARY_PATH"}
    # the nvidia-smi wrapper still finds the mock (the driver's tool carries its own library path here)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\nLD_LIBRARY_PATH={MOCK / 'lib'} exec {node.smi} \"$@\"\n")
    (bindir / "nvidia-smi").chmod(0o755)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    auto = node.check("auto", env=env)
    assert auto["gpu_source"]["source"] == "nvidia-smi"
    assert "libnvidia-ml.so.1 not found" in auto["gpu_source"]["nvml"]
    assert auto["healthy"] and auto["by"]["gpu_count"]["reason"].startswith("8 GPUs visible")
    only = node.check("nvml", only="gpu_count,ecc", env=env)
    assert [r["status"] for r in only["results"]] == ["fail", "fail"]
    assert only["by"]["ecc"]["reason"].startswith("health.gpu_source is nvml, but NVML cannot be read: libnvidia-ml")


def test_a_hung_nvml_call_is_a_finding_and_nvidia_smi_is_read_instead(tmp_path):
    """A real hang: the mock reads its overrides file on a device call; a FIFO nobody writes blocks it forever.
    nvidia-smi gets a readable state file, so the fallback answers."""
    node = Node(tmp_path)
    fifo = tmp_path / "stuck.yaml"
    os.mkfifo(fifo)
    env = node.env(overrides=fifo)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\nMOCK_NVML_OVERRIDES={node.overrides} exec {node.smi} \"$@\"\n")
    (bindir / "nvidia-smi").chmod(0o755)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    extra = "  command_timeout: 2\n"
    doc = node.check("auto", only="gpu_count,clocks", env=env, extra=extra)
    assert not doc["healthy"] and doc["rc"] == 1
    assert doc["gpu_source"]["source"] == "nvidia-smi"
    for r in doc["results"]:
        assert r["status"] == "fail"
        assert r["reason"].startswith("NVML nvmlDeviceGetHandleByIndex (GPU 0) did not answer in 2s (nvidia-smi read "
                                      "instead: ok: ")
    # NVML alone: no fallback, the same call named
    doc = node.check("nvml", only="gpu_count", env=env, extra=extra)
    assert doc["by"]["gpu_count"]["status"] == "fail"
    assert doc["by"]["gpu_count"]["reason"] == ("NVML nvmlDeviceGetHandleByIndex (GPU 0) did not answer in 2s "
                                                "(health.gpu_source: nvml, no fallback)")
