"""`nvidia-smi topo -m` parsing over every real capture in tests/fixtures/topo/, expected values written out,
plus synthetic inputs (named so) for the damage real captures show only partly."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.topology import format_cpulist, parse_cpulist, parse_topo

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "topo"


def parse(name):
    return parse_topo((FIX / name).read_text(), path=name)


def nics(names, devices=None):
    return dict(zip(names, devices or names))


MLX = [f"mlx5_{i}" for i in range(12)]
NICN = [f"NIC{i}" for i in range(12)]

# name: (interconnect, CPU affinity per GPU, NUMA per GPU, {nic name: device}, spot-checked links, warnings)
CASES = {
    "3gpu-nv4-pair-2nic-pix-full-legend-nic-legend.txt": (
        "partial-nvlink", ["64-71"] * 3, [[1]] * 3, nics(NICN[:2], MLX[:2]),
        {(0, "GPU1"): "NV4", (0, "GPU2"): "NODE", (2, "NIC0"): "PHB", (2, "NIC1"): "PHB"},
        ["partial NVLink"]),
    "5gpu-2socket-sys-phb-node-spaces-legend-no-nic.txt": (
        "pcie", ["8-15,24-31"] + ["0-7,16-23"] * 4, [[1], [0], [0], [0], [0]], {},
        {(0, "GPU4"): "SYS", (1, "GPU2"): "PHB", (1, "GPU3"): "NODE", (3, "GPU4"): "PHB"},
        ["PCIe-only: no NVLink between the 5 GPUs", "4 GPU pair(s) cross the CPU interconnect (SYS)"]),
    "a100-2gpu-nv12-8nic-empty-cpu-numa-affinity-matrix-only.txt": (
        "nvlink", ["", ""], [[], []], nics(NICN[:8], [None] * 8),
        {(0, "GPU1"): "NV12", (0, "NIC6"): "PXB", (1, "NIC7"): "PXB", (1, "NIC0"): "SYS"},
        ["no NIC Legend for NIC0, NIC1, NIC2, NIC3, NIC4, NIC5, NIC6, NIC7", "GPU0-1: no CPU Affinity",
         "GPU0-1: no NUMA Affinity"]),
    "a100-2gpu-slice-nv12-8-mlx5-tabs-lmdeploy-check-env.txt": (
        "nvlink", ["48-95,144-191"] * 2, [[1], [1]], nics(MLX[:8]),
        {(0, "GPU1"): "NV12", (0, "mlx5_4"): "NODE", (1, "mlx5_6"): "PXB", (1, "mlx5_0"): "SYS"}, []),
    "a100-4gpu-hgx-nv4-princeton-della-cryoem-mlx5.txt": (
        "nvlink", ["0-23", "0-23", "24-47", "24-47"], [[0], [0], [1], [1]], nics(MLX[:1]),
        {(0, "mlx5_0"): "NODE", (3, "mlx5_0"): "SYS", (2, "GPU3"): "NV4"}, []),
    "a100-4gpu-nv4-3nic-odd-cpu-affinity-gpu-d-2.txt": (
        "nvlink", ["0", "0", "", ""], [[0], [0], [1], [1]], nics(NICN[:3], [None] * 3),
        {(0, "NIC0"): "NODE", (3, "NIC2"): "NODE"},
        ["GPU2-3: no CPU Affinity", "GPU0-1: CPU Affinity lists only 0"]),
    "a100-pcie-8gpu-nvlink-bridge-pairs-nv12-nccl-tests-178-spaces.txt": (
        "partial-nvlink", ["0-31,64-95"] * 4 + ["32-63,96-127"] * 4, [[0]] * 4 + [[1]] * 4, {},
        {(0, "GPU1"): "NV12", (2, "GPU3"): "NV12", (0, "GPU2"): "NODE", (3, "GPU4"): "SYS", (6, "GPU7"): "NV12"},
        ["partial NVLink"]),
    "alcf-polaris-a100-4gpu-nv4-2mlx5-header-spaces.txt": (
        "nvlink", ["24-31,56-63", "16-23,48-55", "8-15,40-47", "0-7,32-39"], [[3], [2], [1], [0]], nics(MLX[:2]),
        {(1, "mlx5_1"): "PHB", (3, "mlx5_0"): "PHB", (0, "mlx5_0"): "SYS"}, []),
    "dgx-a100-gengwg-mlx5-columns-numa-affinity.txt": (
        "nvlink", ["48-63,176-191"] * 2 + ["16-31,144-159"] * 2 + ["112-127,240-255"] * 2 + ["80-95,208-223"] * 2,
        [[3], [3], [1], [1], [7], [7], [5], [5]], nics(MLX),
        {(0, "mlx5_0"): "PXB", (2, "mlx5_3"): "PXB", (4, "mlx5_6"): "PXB", (7, "mlx5_9"): "PXB",
         (7, "mlx5_11"): "SYS"}, []),
    "dgx1-gengwg-topo-mp-pcie-only.txt": (
        "pcie", ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4, [[0]] * 4 + [[1]] * 4, nics(MLX[:4]),
        {(0, "GPU1"): "PIX", (0, "GPU2"): "PHB", (0, "GPU4"): "SYS", (7, "mlx5_3"): "PIX"},
        ["`nvidia-smi topo -mp`"]),
    "dgx1-v100-msccl-tools-4xmlx5-old-legend.txt": (
        "partial-nvlink", ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4, [[]] * 8,
        nics(["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]),
        {(0, "GPU1"): "NV1", (0, "GPU3"): "NV2", (0, "GPU4"): "NV2", (0, "GPU5"): "SYS", (0, "mlx5_0"): "PIX",
         (2, "mlx5_1"): "PIX", (4, "mlx5_2"): "PIX", (7, "mlx5_3"): "PIX"},
        ["GPU0-7: no NUMA Affinity"]),
    "gh200-480gb-1gpu-4nic-bluefield3-gpu-numa-id-1.txt": (
        "pcie", ["0-71"], [[0]], nics(NICN[:4], MLX[:4]), {(0, "NIC3"): "NODE"}, []),
    "h20-8gpu-nv18-8nic-driver535-sglang-24966.txt": (
        "nvlink", ["0-47,96-143"] * 4 + ["48-95,144-191"] * 4, [[0]] * 4 + [[1]] * 4,
        nics(NICN[:8], MLX[1:9]),
        {(0, "NIC0"): "PIX", (3, "NIC3"): "PIX", (4, "NIC4"): "PIX", (7, "NIC7"): "PIX", (0, "NIC4"): "SYS"}, []),
    "hopper-8gpu-nv18-12nic-numa-off-aihub0007.txt": (
        "nvlink", ["0-191"] * 8, [[0]] * 8, nics(NICN, MLX),
        {(0, "NIC0"): "PIX", (3, "NIC5"): "PIX", (7, "NIC11"): "PIX", (0, "NIC11"): "NODE"},
        ["NUMA appears disabled (numa=off?): all 8 GPUs report NUMA node 0 and every CPU (0-191)"]),
    "l40s-x8-2socket-node-sys-1nic-matrix-only.txt": (
        "pcie", ["0-89"] * 4 + ["90-179"] * 4, [[0]] * 4 + [[1]] * 4, nics(NICN[:1], [None]),
        {(0, "NIC0"): "SYS", (0, "GPU3"): "NODE", (0, "GPU4"): "SYS"},
        ["PCIe-only: no NVLink between the 8 GPUs", "16 GPU pair(s) cross", "no NIC Legend for NIC0"]),
    "nchc-nano4-h100x8-10nic-nv18-srun-cgroup-partial-cpu-affinity-nic-legend.txt": (
        "nvlink", [""] * 4 + ["56"] * 4, [[0]] * 4 + [[1]] * 4, nics(NICN[:10], MLX[:10]),
        {(0, "NIC0"): "PIX", (1, "NIC3"): "PIX", (7, "NIC9"): "PIX", (0, "NIC1"): "NODE"},
        ["GPU0-3: no CPU Affinity", "GPU4-7: CPU Affinity lists only 56"]),
    "pcie-8gpu-pix-phb-sys-2socket-nccl-1439-spaces.txt": (
        "pcie", ["0-13,28-41"] * 4 + ["14-27,42-55"] * 4, [[0]] * 4 + [[1]] * 4, {},
        {(0, "GPU1"): "PIX", (0, "GPU2"): "PHB", (3, "GPU4"): "SYS", (6, "GPU7"): "PIX"}, ["PCIe-only"]),
    "pcie-8gpu-pix-quads-node-single-numa-axolotl-536-spaces.txt": (
        "pcie", ["0-23,48-71"] * 8, [[0]] * 8, {},
        {(0, "GPU3"): "PIX", (0, "GPU4"): "NODE", (7, "GPU4"): "PIX"}, ["PCIe-only"]),
    "princeton-della-pli-h100-8gpu-nv18-6nic-odd-cpu-affinity.txt": (
        "nvlink", [""] * 4 + ["1"] * 4, [[0]] * 4 + [[1]] * 4, nics(NICN[:6], MLX[:6]),
        {(0, "NIC0"): "PIX", (0, "NIC1"): "PIX", (3, "NIC2"): "PIX", (4, "NIC4"): "PIX", (6, "NIC5"): "PIX"},
        ["GPU0-3: no CPU Affinity", "GPU4-7: CPU Affinity lists only 1"]),
    "rtx5090-2gpu-workstation-phb-club3090-1229.txt": (
        "pcie", ["0-63"] * 2, [[0]] * 2, {}, {(0, "GPU1"): "PHB", (1, "GPU0"): "PHB"}, ["PCIe-only"]),
    "rtxpro6000-bse-2gpu-topo-mp-pix.txt": (
        "pcie", ["0-47"] * 2, [[0]] * 2, {}, {(0, "GPU1"): "PIX"}, ["`nvidia-smi topo -mp`"]),
    "tesla-p4-single-gpu-numa-affinity-na-hami-99.txt": (
        "pcie", ["0-7"], [[]], {}, {}, ["GPU0: no NUMA Affinity"]),
}
BAD = {
    # real paste damage: one tab lost in the header ("NIC8NIC9") and in GPU4-7 rows ("NODENODE")
    "dgx-h100-12nic-vllm-13855-paste-merged-columns-gpu-rows.txt": (1, "NIC8NIC9"),
    # `nvidia-smi topo -c`: not a matrix at all
    "dgx-a100-topo-c-48-and-c-222.txt": (None, "no `nvidia-smi topo -m` header"),
}


def test_every_fixture_is_covered():
    assert set(CASES) | set(BAD) == {p.name for p in FIX.iterdir()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture(name):
    inter, cpus, numa, nic_map, links, warns = CASES[name]
    topo = parse(name)
    prof = topo.to_profile()
    assert list(prof) == ["gpus", "nics", "interconnect", "warnings"]
    assert prof["interconnect"] == inter
    assert [g["index"] for g in prof["gpus"]] == list(range(len(cpus)))
    assert [format_cpulist(g["cpus"]) for g in prof["gpus"]] == cpus
    assert [g["numa"] for g in prof["gpus"]] == numa
    assert {n["name"]: n["device"] for n in prof["nics"]} == nic_map
    assert [n["name"] for n in prof["nics"]] == list(nic_map)
    cols = [f"GPU{i}" for i in range(len(cpus))] + list(nic_map)
    for g in prof["gpus"]:
        assert set(g["links"]) == set(cols) - {f"GPU{g['index']}"}  # every column but itself
        assert list(g["links"]) == [c for c in cols if c != f"GPU{g['index']}"]
    for (gi, col), tok in links.items():
        assert prof["gpus"][gi]["links"][col] == tok, (gi, col)
    for w in warns:
        assert any(w in x for x in prof["warnings"]), (w, prof["warnings"])
    if not warns:
        assert prof["warnings"] == []


@pytest.mark.parametrize("name", sorted(BAD))
def test_untrustworthy_capture_is_refused_with_its_line(name):
    line, msg = BAD[name]
    with pytest.raises(UsageError, match=msg) as e:
        parse(name)
    assert e.value.path == name and e.value.line == line
    assert e.value.exit_code == 2


def test_full_document_for_the_3gpu_capture():
    assert parse("3gpu-nv4-pair-2nic-pix-full-legend-nic-legend.txt").to_profile() == {
        "gpus": [
            {"index": 0, "cpus": list(range(64, 72)), "numa": [1],
             "links": {"GPU1": "NV4", "GPU2": "NODE", "NIC0": "NODE", "NIC1": "NODE"}},
            {"index": 1, "cpus": list(range(64, 72)), "numa": [1],
             "links": {"GPU0": "NV4", "GPU2": "NODE", "NIC0": "NODE", "NIC1": "NODE"}},
            {"index": 2, "cpus": list(range(64, 72)), "numa": [1],
             "links": {"GPU0": "NODE", "GPU1": "NODE", "NIC0": "PHB", "NIC1": "PHB"}},
        ],
        "nics": [{"name": "NIC0", "device": "mlx5_0"}, {"name": "NIC1", "device": "mlx5_1"}],
        "interconnect": "partial-nvlink",
        "warnings": ["partial NVLink: only some GPU pairs are NVLink-connected; keep a task's GPUs within an "
                     "NVLink group"],
    }


def test_gpu_numa_id_is_read_for_grace_hopper():
    assert parse("gh200-480gb-1gpu-4nic-bluefield3-gpu-numa-id-1.txt").gpus[0].gpu_numa_id == 1
    assert parse("h20-8gpu-nv18-8nic-driver535-sglang-24966.txt").gpus[0].gpu_numa_id is None


# ---- synthetic inputs (built in the test from a real capture, named synthetic) ----

H20 = "h20-8gpu-nv18-8nic-driver535-sglang-24966.txt"


def h20_lines():
    return (FIX / H20).read_text().splitlines(keepends=True)


def test_synthetic_escape_codes_and_remnants_in_header_are_ignored():
    lines = h20_lines()
    ref = parse_topo("".join(lines)).to_profile()
    # nvidia-smi underlines the header on a tty: ESC[4m ... ESC[0m; a paste often keeps only "[4m"
    for pre, post in (("\x1b[4m", "\x1b[0m"), ("[4m", "[0m")):
        text = pre + lines[0].rstrip("\n") + post + "\n" + "".join(lines[1:])
        assert parse_topo(text, path="synthetic").to_profile() == ref


def test_synthetic_crlf_and_trailing_tabs_parse_the_same():
    lines = h20_lines()
    ref = parse_topo("".join(lines)).to_profile()
    assert parse_topo("".join(ln.replace("\n", "\r\n") for ln in lines)).to_profile() == ref
    # NIC rows ending in tabs (as the 580 driver prints them)
    text = "".join(ln.rstrip("\n") + "\t\t\t\t\n" if ln.startswith("NIC") else ln for ln in lines)
    assert parse_topo(text).to_profile() == ref


def test_synthetic_tabs_expanded_to_spaces_parse_the_same():
    lines = h20_lines()
    ref = parse_topo("".join(lines)).to_profile()
    assert parse_topo("".join(ln.expandtabs(8) for ln in lines)).to_profile() == ref


def test_synthetic_affinity_columns_absent():
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n"
    prof = parse_topo(text).to_profile()
    assert prof["gpus"][1] == {"index": 1, "cpus": [], "numa": [], "links": {"GPU0": "NV4"}}
    assert prof["interconnect"] == "nvlink"


def _damage(row_prefix, old, new):
    return "".join(ln.replace(old, new, 1) if ln.startswith(row_prefix) else ln for ln in h20_lines())


@pytest.mark.parametrize("row,old,new,line,msg", [
    ("GPU3", "\tNV18\tNV18\tNV18\t X", "\tNV18\tNV18NV18\t X", 5, "run together"),   # lost tab
    ("GPU2", "PIX", "PIXX", 4, "unknown link 'PIXX'"),
    ("GPU1", " X ", "NV18", 3, "expected X on the diagonal"),
    ("NIC2", "PIX", "NODE", 12, "not symmetric: GPU2->NIC2 is PIX"),
    ("GPU5", "48-95,144-191", "48-95;144", 7, "CPU Affinity '48-95;144' is not a cpu list"),
    ("GPU6", "\t1\t\tN/A", "\t1\t7\tN/A", 8, "cannot tell which"),
    ("GPU0", "GPU0", "GPU9", 2, "row label 'GPU9' is not a column"),
])
def test_synthetic_damaged_rows_name_their_line(row, old, new, line, msg):
    text = _damage(row, old, new)
    with pytest.raises(UsageError, match=msg) as e:
        parse_topo(text, path="synthetic.txt")
    assert (e.value.path, e.value.line) == ("synthetic.txt", line)


def test_synthetic_truncated_capture_is_refused():
    lines = h20_lines()
    with pytest.raises(UsageError, match="no row for GPU6, GPU7") as e:
        parse_topo("".join(lines[:7]), path="cut.txt")
    assert e.value.line == 7  # the last line read


def test_synthetic_header_damage():
    lines = h20_lines()
    with pytest.raises(UsageError, match="NIC columns are not NIC0..NIC6 in order") as e:
        parse_topo(lines[0].replace("\tNIC3", "", 1) + "".join(lines[1:]), path="s")
    assert e.value.line == 1
    with pytest.raises(UsageError, match="GPU columns are not GPU0..GPU7"):
        parse_topo(lines[0].replace("GPU3", "GPU9", 1) + "".join(lines[1:]), path="s")


def test_synthetic_spaces_off_tab_stops_with_empty_affinity_are_refused():
    # single spaces: no way to tell which affinity column is empty
    text = "GPU0 GPU1 CPU Affinity NUMA Affinity\nGPU0 X NV4 0-3\nGPU1 NV4 X 0-3 0\n"
    with pytest.raises(UsageError, match="cannot be matched") as e:
        parse_topo(text, path="s")
    assert e.value.line == 2
    ok = "GPU0 GPU1 CPU Affinity NUMA Affinity\nGPU0 X NV4 0-3 0\nGPU1 NV4 X 0-3 0\n"
    assert [g["cpus"] for g in parse_topo(ok).to_profile()["gpus"]] == [[0, 1, 2, 3]] * 2


def test_cpulist():
    assert parse_cpulist("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpulist("") == []
    assert parse_cpulist("3-1") is None and parse_cpulist("a") is None
    assert format_cpulist([5, 0, 1, 2, 9, 10]) == "0-2,5,9-10"


# --- Issue 17 (T1/W7/H7): hostile numbers and sizes, folded from test_hardening_health.py ----------------------------

def test_t1_topo_numa_id_of_5000_digits_is_an_error():
    text = ("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t0\t\t" + "1" * 5000 + "\n")
    with pytest.raises(UsageError, match="GPU NUMA ID"):
        parse_topo(text, path="t.txt")


def test_w7_topo_unicode_digits_are_an_error():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t٠-٧\t0\n"
    with pytest.raises(UsageError, match="CPU Affinity"):
        parse_topo(text, path="t.txt")


def test_h7_a_1000_gpu_matrix_parses_or_is_refused_quickly():
    """Synthetic: 1000 GPUs, all NV18 (the symmetry check was cubic: 36 s)."""
    n = 1000
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = "".join(f"GPU{i}\t" + "\t".join(" X " if j == i else "NV18" for j in range(n)) + "\t0-7\t0\n"
                   for i in range(n))
    topo = parse_topo(head + rows, path="big.txt")
    assert len(topo.gpus) == n
