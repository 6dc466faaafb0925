"""`slurmkit fabric --nvsmi-dir` (issue 33): NVLink domains from each node's `nvidia-smi -q` Fabric section ->
topology/block. Real captures: an 8x H100 HGX node (zero ClusterUUID, CliqueId 0: no multi-node domain, normal
there) and the Azure NVL-class node whose Fabric says Completed / Insufficient Resources. The GB200-style
multi-node domains are SYNTHETIC: the H100 capture with its ClusterUUID/CliqueId values replaced here (no real
NVL72 `-q` with a non-zero ClusterUUID is in the fixtures)."""
import json
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.fabric import nvlink

from clirun import run_cli  # noqa: E402
from fabric_synth import H100_Q as H100, ZERO_UUID as ZERO, synthetic_nvl  # noqa: E402

DCGM = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "dcgm"
AZURE = DCGM / "azure-miv50-nvlink-fabric-completed-insufficient-resources-cliqueid-0-zero-uuid-dedented-azhpc-506.txt"


def nodes_dir(tmp_path, texts):
    d = tmp_path / "q"
    d.mkdir()
    for node, text in texts.items():
        (d / f"{node}.txt").write_text(text)
    return str(d)


def test_real_h100_hgx_eight_gpus_completed_success_zero_domain():
    gpus = nvlink.parse_fabric(H100.read_text(), str(H100))
    assert len(gpus) == 8
    assert {(g.state, g.status, g.clique, g.uuid) for g in gpus} == {("Completed", "Success", "0", ZERO)}


def test_real_hgx_nodes_are_in_no_block_and_that_is_the_finding(tmp_path):
    d = nodes_dir(tmp_path, {"h1": H100.read_text(), "h2": H100.read_text()})
    rc, out, err = run_cli(["fabric", "--nvsmi-dir", d, "--json"])
    doc = json.loads(out)
    assert rc == 1 and doc["blocks"] == [] and doc["nodes"]["h1"]["domain"] is None
    assert [f["kind"] for f in doc["findings"]] == ["no-nvlink-domain"]


def test_real_azure_insufficient_resources_is_fabric_not_ready_and_leaves_the_block(tmp_path):
    gpus = nvlink.parse_fabric(AZURE.read_text(), str(AZURE))
    assert [(g.state, g.status) for g in gpus] == [("Completed", "Insufficient Resources")]
    u = "6f0e3a1c-5b2d-4c8e-9a7f-1d2e3f405162"
    d = nodes_dir(tmp_path, {"gb01": synthetic_nvl(u, 7), "gb02": synthetic_nvl(u, 7),
                             "miv50-vin1-1g03-30": AZURE.read_text()})
    rc, out, err = run_cli(["fabric", "--nvsmi-dir", d, "--topology-conf"])
    assert rc == 1
    assert "finding: fabric-not-ready: node miv50-vin1-1g03-30: 1 GPU(s) not in their NVLink domain (State " \
           "Completed, Status Insufficient Resources)" in err
    assert [ln for ln in out.splitlines() if not ln.startswith("#")] == [
        "BlockName=nvl-6f0e3a1c-7 Nodes=gb[01-02]", "BlockSizes=2"]


def test_synthetic_two_nvl_domains_two_blocks_conf_and_yaml(tmp_path):
    a, b = "6f0e3a1c-5b2d-4c8e-9a7f-1d2e3f405162", "0a1b2c3d-0000-4000-8000-00000000beef"
    texts = {f"gb{i:02d}": synthetic_nvl(a, 1) for i in range(1, 5)}
    texts.update({f"gb{i:02d}": synthetic_nvl(b, 2) for i in (5, 6)})
    d = nodes_dir(tmp_path, texts)
    rc, out, err = run_cli(["fabric", "--nvsmi-dir", d, "--topology-conf"])
    assert rc == 0 and err == ""
    assert [ln for ln in out.splitlines() if not ln.startswith("#")] == [
        "BlockName=nvl-6f0e3a1c-1 Nodes=gb[01-04]", "BlockName=nvl-0a1b2c3d-2 Nodes=gb[05-06]", "BlockSizes=2"]
    rc, out, _ = run_cli(["fabric", "--nvsmi-dir", d, "--topology-yaml"])
    assert rc == 0 and yaml.safe_load(out) == [{"topology": "nvlink", "cluster_default": True, "block": {
        "block_sizes": [2], "blocks": [{"block": "nvl-6f0e3a1c-1", "nodes": "gb[01-04]"},
                                       {"block": "nvl-0a1b2c3d-2", "nodes": "gb[05-06]"}]}}]


def test_synthetic_node_whose_gpus_report_two_domains(tmp_path):
    a = "6f0e3a1c-5b2d-4c8e-9a7f-1d2e3f405162"
    d = nodes_dir(tmp_path, {"gb01": synthetic_nvl(a, 1), "gb02": synthetic_nvl(a, 1, {3: (a, 2)})})
    rc, out, err = run_cli(["fabric", "--nvsmi-dir", d, "--json"])
    doc = json.loads(out)
    assert rc == 1 and [f["kind"] for f in doc["findings"]] == ["split-domain"]
    assert doc["blocks"] == [{"name": "nvl-6f0e3a1c-1", "nodes": ["gb01"]}]


def test_cut_fabric_section_exits_2_with_file_and_line(tmp_path):
    text = H100.read_text()
    cut = text[: text.index("ClusterUUID")]
    d = nodes_dir(tmp_path, {"h1": cut})
    rc, out, err = run_cli(["fabric", "--nvsmi-dir", d])
    line = cut[: cut.index("    Fabric")].count("\n") + 1
    assert rc == 2 and f"{d}/h1.txt:{line}: a Fabric section without its State/ClusterUUID" in err


@pytest.mark.parametrize("name,what", [("bad,name", "does not name a node"), (None, "no nvidia-smi -q captures")])
def test_bad_directory_exits_2(tmp_path, name, what):
    d = tmp_path / "q"
    d.mkdir()
    if name:
        (d / name).write_text(H100.read_text())
    rc, _, err = run_cli(["fabric", "--nvsmi-dir", str(d)])
    assert rc == 2 and what in err
