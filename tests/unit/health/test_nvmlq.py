"""health/nvmlq.py: what NVML answered, printed as the `nvidia-smi -q` text the checks parse. The answers here are
written out by hand (plain data, as health/nvml.py returns them); the same printing over NVIDIA's mock NVML, both
ways against the real nvidia-smi, is tests/unit/health/test_nvml_source.py."""
from __future__ import annotations

from slurmkit import config
from slurmkit.health import nvsmi
from slurmkit.health.checks import ecc, fabric, gpu_count
from slurmkit.health.nvmlq import Failed, render

S = config.loads("", "site.yaml")


def gpu(i=0, **kw):
    g = {"index": i, "bus_id": f"00000000:{0x1A + i:02X}:00.0", "name": "NVIDIA H100 80GB HBM3", "minor": i,
         "uuid": f"GPU-{i}", "recovery": 0, "reasons": 1, "ecc_mode": (1, 1), "remap": (0, 0, 0, 0),
         "memory": {"total": 80 << 30, "used": 0, "free": 80 << 30}, "processes": [],
         "fabric": {"state": 3, "status_text": "Success", "clique_id": 0, "cluster_uuid": bytes(16),
                    "health_mask": 0x1AA, "health_summary": 1}}
    g.update(kw)
    return g


def node(*gpus, count=None):
    return {"driver_version": "550.163.01", "cuda_version": "12.4", "count": len(gpus) if count is None else count,
            "gpus": list(gpus)}


def test_the_text_parses_as_nvidia_smi_output_with_every_field_the_checks_read():
    q = nvsmi.parse_q(render(node(gpu(0), gpu(1))))
    assert q["driver_version"] == "550.163.01" and q["cuda_version"] == "12.4" and len(q["gpus"]) == 2
    t = q["gpus"][1]["tree"]
    assert t.get_ci("Minor Number") == "1" and t.get_ci("GPU Recovery Action") == "None"
    assert t.get_ci("PCI", "GPU Link Info", "Link Width", "Current") == "N/A"    # not read: N/A, never a number
    assert t.get_ci("Fabric", "Health", "Incorrect Configuration") == "None"
    assert fabric.evaluate(render(node(gpu(0), gpu(1))), S.fabric).status == "ok"


def test_no_gpu_and_an_unreadable_count_are_nvidia_smis_own_error_lines():
    r = gpu_count.evaluate(render(node(count=0)), 8)
    assert (r.status, r.reason) == ("fail", "nvidia-smi: No devices were found")
    r = gpu_count.evaluate(render(node(count=Failed("Unknown Error"))), 8)
    assert (r.status, r.reason) == ("fail", "nvidia-smi: Error: nvmlDeviceGetCount(): Unknown Error")


def test_a_lost_gpu_and_a_gpu_without_a_handle_read_as_nvidia_smi_prints_them():
    lost = Failed("GPU is lost")
    text = render(node(gpu(0), gpu(1, remap=lost, memory=lost, minor=lost), {"index": 2, "handle": lost}))
    assert "    Remapped Rows                         : GPU is lost" in text
    assert "Unable to determine the device handle for GPU 2: GPU is lost" in text
    r = gpu_count.evaluate(text, 3)
    assert r.status == "fail" and "Unable to determine the device handle" in r.reason
    assert ecc.evaluate(render(node(gpu(0, remap=(0, 0, 1, 0)))), S.ecc).reason == (
        "GPU 0000:1a:00: row remapping pending (GPU reset needed)")
