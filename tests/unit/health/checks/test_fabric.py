"""fabric: a GPU's NVLink fabric from `nvidia-smi -q`. Real captures: every fixture holding a Fabric section (one HGX
H100 node Completed/Success with CliqueId 0 and a zero ClusterUUID: normal; an Azure NVL node Completed with
"Insufficient Resources", pasted dedented: a fault that passed a grep for N/A; PCIe cards with every field N/A).
No capture shows a fabric In Progress, a Health Summary or its conditions (PROVENANCE.md's fourth-collection gaps):
those cases are synthetic, made from the real H100 capture by changing its Fabric lines, and named so. The
Health labels are the ones drivers 570+ print (Summary, Bandwidth, Route Recovery in progress, Route Unhealthy,
Access Timeout Recovery, Incorrect Configuration)."""

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.errors import UsageError
from slurmkit.health import nvsmi
from slurmkit.health.checks import fabric

from checkcases import FIX, assert_verdict, judge as judge_check
from sitesettings import make_settings

H100 = FIX / "dcgm" / "h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt"
AZURE = FIX / "dcgm" / "azure-miv50-nvlink-fabric-completed-insufficient-resources-cliqueid-0-zero-uuid-dedented-azhpc-506.txt"
A40 = FIX / "misc" / "a40-x10-nvidia-smi-q-550-idle-p8-sw-power-cap-active-gpu0-gpu3-clocks-0mhz-dram-corr-10.txt"
# every fixture holding a Fabric section -> (status, GPUs read)
EXPECTED = {
    H100: ("ok", 8),
    AZURE: ("fail", 1),
    A40: ("ok", 10),
    FIX / "ecc" / "princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt": ("ok", 1),
    FIX / "ecc" / "h800-sxm-q-i0-full-ecc-disabled-remap-histogram-2560.txt": ("ok", 1),
    FIX / "ecc" / "gpud-rtx4090-8gpu-q-535-first-gpu-ecc-disabled-na.txt": ("ok", 1),
}


def judge(text, s=None):
    return judge_check("fabric", text, s)


def _has_fabric(text: str) -> bool:
    try:
        q = nvsmi.parse_q(text)
    except UsageError:
        return False
    return any(fabric.read(g["tree"]) is not None for g in q["gpus"])


def test_every_capture_with_a_fabric_section_is_judged():
    assert {p for p in FIX.rglob("*.txt") if _has_fabric(p.read_text(errors="replace"))} == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name[:50])
def test_fixture_verdict(path):
    assert_verdict("fabric", path, EXPECTED)


def test_the_azure_node_that_passed_a_grep_for_na_fails_with_its_status():
    r = judge(AZURE.read_text())
    assert r.code == "fabric"
    assert r.reason == "GPU 0: fabric status: Insufficient Resources (NVLink fabric)"


def test_one_hgx_node_in_no_clique_is_normal_and_pcie_cards_are_not_on_a_fabric():
    assert judge(H100.read_text()).reason == "8 GPUs: NVLink fabric Completed, Success"
    assert judge(A40.read_text()).reason == "10 GPUs: not on an NVLink fabric (Fabric fields N/A)"


def _fabric_lines(text: str, gpu: int, new: dict[str, str], health: dict[str, str] | None = None) -> str:
    """SYNTHETIC: the capture with GPU `gpu`'s Fabric fields set to `new`, and a Health block of `health` lines
    (the labels of drivers 570+) in place of the capture's own."""
    out, seen, in_fabric, skipping = [], -1, False, False
    for ln in text.splitlines():
        s = ln.strip()
        if ln.startswith("    Fabric"):
            seen += 1
            in_fabric = seen == gpu
            out.append(ln)
            continue
        if in_fabric and ln.startswith("        ") and not ln.startswith("            "):
            key = s.split(":")[0].strip()
            skipping = key == "Health" and health is not None
            if key in new:
                ln = f"        {key:<34}: {new[key]}"
            elif skipping:
                out.append(ln)
                out += [f"            {k:<30}: {v}" for k, v in health.items()]
                continue
        elif in_fabric and not ln.startswith("        "):
            in_fabric = skipping = False
        elif skipping:
            continue
        out.append(ln)
    return "\n".join(out) + "\n"


def test_synthetic_a_fabric_not_yet_trained_fails_naming_the_fabric_manager():
    r = judge(_fabric_lines(H100.read_text(), 3, {"State": "In Progress", "Status": "N/A"}))
    assert r.status == "fail"
    assert r.reason == ("GPU 0000:5d:00: fabric not ready: State In Progress (is nvidia-fabricmanager running?) "
                        "(NVLink fabric)")


def test_synthetic_a_lost_gpu_is_said_as_lost_not_as_the_fabric_manager():
    # what the NVML source prints for a GPU fallen off the bus: every field "GPU is lost"
    text = _fabric_lines(H100.read_text(), 2, {"State": "GPU is lost", "Status": "GPU is lost"})
    r = judge(text)
    assert r.status == "fail"
    assert r.reason == "GPU 0000:3a:00: fabric not ready: the GPU is lost (fell off the bus?) (NVLink fabric)"


def test_synthetic_completed_and_success_but_unhealthy_fails():
    # the GB200 case of issue 32: State Completed, Status Success, Health Unhealthy
    health = {"Summary": "Unhealthy", "Bandwidth": "Full", "Route Recovery in progress": "False",
              "Route Unhealthy": "True", "Access Timeout Recovery": "False", "Incorrect Configuration": "None"}
    r = judge(_fabric_lines(H100.read_text(), 0, {}, health))
    assert r.status == "fail" and r.reason.startswith("GPU 0000:18:00: fabric health Unhealthy; Route Unhealthy")
    g0 = r.evidence["gpus"][0]
    # CliqueId 0 with a zero ClusterUUID is named too (one HGX node: no finding unless the site lists it)
    assert g0["conditions"] == ["unhealthy", "route_unhealthy", "clique_missing"] and g0["summary"] == "Unhealthy"


def test_synthetic_degraded_bandwidth_and_recovery_warn_and_the_lists_are_config():
    health = {"Summary": "Limited Capacity", "Bandwidth": "Degraded", "Route Recovery in progress": "True"}
    text = _fabric_lines(H100.read_text(), 7, {}, health)
    r = judge(text)
    assert r.status == "warn"
    assert r.reason == ("GPU 0000:db:00: fabric health Limited Capacity; Route Recovery in progress; "
                        "fabric bandwidth Degraded")
    s = make_settings("fabric:\n  fail_on: [bandwidth_degraded]\n  warn_on: []\n")
    assert judge(text, s).reason == "GPU 0000:db:00: fabric bandwidth Degraded (NVLink fabric)"
    s = make_settings("fabric:\n  fail_on: []\n  warn_on: []\n")
    assert judge(AZURE.read_text(), s).status == "ok"


def test_synthetic_an_nvl_rack_wants_every_gpu_in_one_clique():
    uuid = "3f6b0c3a-9b1e-4d5e-8a2f-7c1d2e3f4a5b"
    text = H100.read_text()
    for g in range(8):
        text = _fabric_lines(text, g, {"CliqueId": "32766", "ClusterUUID": uuid})
    assert judge(text).status == "ok"
    odd = _fabric_lines(text, 5, {"CliqueId": "32767"})
    r = judge(odd)
    assert r.status == "fail" and r.reason == (
        f"GPU 0000:ab:00: in another NVLink clique than the node's other GPUs: ClusterUUID {uuid} clique 32767 "
        "(NVLink fabric)")
    # a zero clique is a fault only where the site says every GPU belongs to one (an NVL rack, via overrides:)
    rack = make_settings("fabric:\n  fail_on: [not_ready, status_error, clique_missing]\n")
    assert judge(text, rack).status == "ok"
    r = judge(H100.read_text(), rack)
    assert r.status == "fail" and r.reason.startswith("GPU 0000:18:00: in no NVLink clique (CliqueId 0, zero ClusterUUID)")


def test_a_condition_the_check_does_not_have_is_a_config_error_with_its_line():
    with pytest.raises(UsageError) as e:
        make_settings("fabric:\n  warn_on: [bandwidth_degraded, bandwith_degraded]\n")
    assert e.value.path == "site.yaml" and e.value.line == 2 and "bandwith_degraded" in str(e.value)


def test_input_without_a_fabric_section_is_unreadable_not_ok():
    # the 535 driver prints no Fabric section (the dev rig's mock-NVML capture): the check cannot say ok
    for path in (FIX / "local" / "nvml-mock-h100x8-nvidia-smi-535-q-gpu3-fallen-off-bus.txt",
                 FIX / "ecc" / "ml-eng-sram-uncorrectable-grep.txt"):
        with pytest.raises(UsageError, match="no Fabric section"):
            judge(path.read_text())


_VALUES = st.sampled_from(["Completed", "In Progress", "Not Started", "N/A", "Success", "Failure", "Unhealthy",
                           "Healthy", "Degraded", "Full", "True", "False", "None", "0", "7", " ", ":", "[N/A]"])
_KEYS = ["State", "Status", "CliqueId", "ClusterUUID"]
_HEALTH = ["Summary", "Bandwidth", "Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery",
           "Incorrect Configuration"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(_KEYS), _VALUES),
                          st.dictionaries(st.sampled_from(_HEALTH), _VALUES)), min_size=1, max_size=4))
def test_any_fabric_block_gets_a_verdict_and_ok_only_when_nothing_is_wrong(gpus):
    text = ""
    for i, (fields, health) in enumerate(gpus):
        text += f"GPU 00000000:{i:02X}:00.0\n    Product Name                          : NVIDIA H100\n    Fabric\n"
        text += "".join(f"        {k:<34}: {v}\n" for k, v in fields.items())
        if health:
            text += "        Health\n" + "".join(f"            {k:<30}: {v}\n" for k, v in health.items())
    r = fabric.evaluate(text, make_settings().fabric)
    assert r.status in ("ok", "warn", "fail") and len(r.evidence["gpus"]) == len(gpus)
    if r.status == "ok":
        for g in r.evidence["gpus"]:
            assert not g["conditions"] or set(g["conditions"]) <= {"clique_missing"}, g
            assert "state" not in g or g["state"] == "Completed", g
