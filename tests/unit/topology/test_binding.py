"""plan_binding over profiles built from real `nvidia-smi topo -m` captures (tests/fixtures/topo/)."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.topology import format_cpulist, plan_binding, profile_from_text, load_profile

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def profile(name, lscpu=None):
    text = (FIX / "topo" / name).read_text()
    ltext = (FIX / "lscpu" / lscpu).read_text() if lscpu else None
    return profile_from_text(text, path=name, lscpu_text=ltext, lscpu_path=lscpu)


def cpus(plan):
    return [format_cpulist(t["cpus"]) for t in plan["tasks"]]


def test_h20_two_gpus_per_task_keeps_numa_halves_and_pix_nics():
    plan = plan_binding(profile("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt"), 2)
    assert [t["gpus"] for t in plan["tasks"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # NUMA 0 = 0-47,96-143 split between two tasks, each run sliced so SMT siblings (cpu, cpu+96) stay together
    assert cpus(plan) == ["0-23,96-119", "24-47,120-143", "48-71,144-167", "72-95,168-191"]
    # NIC Legend maps NIC0..7 to mlx5_1..8: each GPU's PIX NIC
    assert [t["nics"] for t in plan["tasks"]] == [["mlx5_1", "mlx5_2"], ["mlx5_3", "mlx5_4"],
                                                  ["mlx5_5", "mlx5_6"], ["mlx5_7", "mlx5_8"]]
    assert plan["sbatch"] == ["--ntasks-per-node=4", "--gpus-per-node=8", "--cpus-per-task=48", "--exclusive"]
    assert plan["srun"][0] == "--gpu-bind=mask_gpu:0x3,0xc,0x30,0xc0"
    mask0 = int(plan["srun"][1].split(":", 1)[1].split(",")[0], 16)
    assert [i for i in range(192) if mask0 >> i & 1] == list(range(0, 24)) + list(range(96, 120))
    assert plan["env"] == {"NCCL_IB_HCA": "mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8"}


def test_dgx1_hybrid_cube_mesh_pairs_the_double_nvlinks():
    # DGX-1 V100: GPU0 has NV1 to 1,2 and NV2 to 3,4; the pair with two links and the same CPUs wins
    plan = plan_binding(profile("dgx1-v100-msccl-tools-4xmlx5-old-legend.txt"), 2)
    assert [t["gpus"] for t in plan["tasks"]] == [[0, 3], [1, 2], [4, 7], [5, 6]]
    assert any("GPUs 0,3 together: NVLink (NV2)" == n for n in plan["notes"])
    # mlx5 columns in the order mlx5_0, mlx5_2, mlx5_1, mlx5_3: GPU0 is PIX to mlx5_0, GPU3 PIX to mlx5_1
    assert plan["tasks"][0]["nics"] == ["mlx5_0", "mlx5_1"]
    assert plan["tasks"][2]["nics"] == ["mlx5_2", "mlx5_3"]


def test_nvlink_bridge_pairs_stay_together_on_a_pcie_a100_box():
    plan = plan_binding(profile("a100-pcie-8gpu-nvlink-bridge-pairs-nv12-nccl-tests-178-spaces.txt"), 2)
    assert [t["gpus"] for t in plan["tasks"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert plan["env"] == {}
    assert "no NICs in the profile: no NCCL_IB_HCA hint" in plan["notes"]


def test_pcie_box_four_per_task_follows_switches_and_sockets():
    plan = plan_binding(profile("pcie-8gpu-pix-phb-sys-2socket-nccl-1439-spaces.txt"), 4)
    assert [t["gpus"] for t in plan["tasks"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert cpus(plan) == ["0-13,28-41", "14-27,42-55"]
    assert plan["srun"] == ["--gpu-bind=mask_gpu:0xf,0xf0", "--cpu-bind=mask_cpu:0x3fff0003fff,0xfffc000fffc000"]
    assert any(n.startswith("PCIe-only node") for n in plan["notes"])


def test_pcie_box_two_per_task_prefers_pix_pairs():
    plan = plan_binding(profile("pcie-8gpu-pix-phb-sys-2socket-nccl-1439-spaces.txt"), 2)
    assert [t["gpus"] for t in plan["tasks"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert "GPUs 0,1 together: PCIe/mixed (PIX)" in plan["notes"]


def test_one_gpu_per_task_uses_map_gpu_and_exact_nccl_names_on_dgx_a100():
    plan = plan_binding(profile("dgx-a100-gengwg-mlx5-columns-numa-affinity.txt"), 1)
    assert plan["srun"][0] == "--gpu-bind=map_gpu:0,1,2,3,4,5,6,7"
    assert cpus(plan)[:2] == ["48-55,176-183", "56-63,184-191"]
    # mlx5_1 would also select mlx5_10 and mlx5_11 as a prefix: the hint uses NCCL's exact-match "="
    assert plan["env"]["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9"
    assert plan["tasks"][0]["nics"] == ["mlx5_0", "mlx5_1"]


def test_sys_only_nic_is_not_bound():
    plan = plan_binding(profile("l40s-x8-2socket-node-sys-1nic-matrix-only.txt"), 2)
    assert all(t["nics"] == [] for t in plan["tasks"])
    assert plan["env"] == {}
    assert any("every NIC is SYS" in n for n in plan["notes"])


def test_nameless_nics_are_reported_not_guessed():
    plan = plan_binding(profile("a100-4gpu-nv4-3nic-odd-cpu-affinity-gpu-d-2.txt"), 2)
    assert plan["env"] == {}
    assert any("NIC0, NIC1, NIC2 are near the GPUs but their device names are unknown" in n for n in plan["notes"])


def test_unknown_cpu_affinity_gives_no_cpu_bind_but_lscpu_fills_it():
    name = "princeton-della-pli-h100-8gpu-nv18-6nic-odd-cpu-affinity.txt"
    plan = plan_binding(profile(name), 4)
    assert not any(o.startswith("--cpu-bind") for o in plan["srun"])
    assert not any(o.startswith("--cpus-per-task") for o in plan["sbatch"])
    assert any("CPU affinity unknown" in n for n in plan["notes"])
    # with the node class's real lscpu, GPU0-3 get NUMA node 0 = the even CPUs (interleaved numbering)
    plan = plan_binding(profile(name, "princeton-pli-h100-node-xeon8468-lscpu.txt"), 4)
    assert plan["tasks"][0]["cpus"] == list(range(0, 96, 2))
    assert plan["tasks"][1]["cpus"] == list(range(1, 96, 2))
    assert "--cpus-per-task=48" in plan["sbatch"]
    # NIC0/NIC1 are PIX to GPU0, NIC2 to GPU3: mlx5_0..2 for task 0; NIC3/4 (GPU4), NIC5 (GPU6) for task 1
    assert plan["tasks"][0]["nics"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert plan["tasks"][1]["nics"] == ["mlx5_3", "mlx5_4", "mlx5_5"]


def test_fewer_tasks_than_fit_leaves_gpus_unused():
    plan = plan_binding(profile("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt"), 2, tasks_per_node=1)
    assert [t["gpus"] for t in plan["tasks"]] == [[0, 1]]
    assert plan["sbatch"][:2] == ["--ntasks-per-node=1", "--gpus-per-node=2"]
    assert "6 of the node's 8 GPUs stay unused (1 tasks x 2 GPUs)" in plan["notes"]


@pytest.mark.parametrize("k,t", [(0, None), (9, None), (3, 3), (2, 0)])
def test_impossible_requests_are_usage_errors(k, t):
    with pytest.raises(UsageError):
        plan_binding(profile("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt"), k, t)


@pytest.mark.parametrize("doc,msg", [
    ([], "expected a JSON object"),
    ({"gpus": [], "nics": [], "interconnect": "pcie"}, "non-empty"),
    ({"gpus": [{"index": 1, "cpus": [], "numa": [], "links": {}}], "nics": [], "interconnect": "pcie"}, "index 0"),
    ({"gpus": [{"index": 0, "cpus": ["a"], "numa": [], "links": {}}], "nics": [], "interconnect": "pcie"},
     "non-negative integers"),
    ({"gpus": [{"index": 0, "cpus": [], "numa": [], "links": {}}], "nics": [], "interconnect": "nv"},
     "interconnect"),
])
def test_malformed_profiles_are_usage_errors(doc, msg):
    with pytest.raises(UsageError, match=msg):
        plan_binding(doc, 1)


def test_load_profile_reads_json_or_raw_topo(tmp_path):
    import json
    p = profile("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt")
    f = tmp_path / "node.json"
    f.write_text(json.dumps(p))
    assert load_profile(str(f)) == p
    assert load_profile(str(FIX / "topo" / "h20-8gpu-nv18-8nic-driver535-sglang-24966.txt")) == p
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpus": [\n  1,\n')
    with pytest.raises(UsageError) as e:
        load_profile(str(bad))
    assert e.value.path == str(bad) and e.value.line == 3
