"""The binding plan_binding produces, run on the real dev cluster: Slurm accepts its #SBATCH and srun options and
each task sees exactly the GPUs the plan gave it (CUDA_VISIBLE_DEVICES set by --gpu-bind)."""
import re
import time

import pytest

from slurmkit.topology import plan_binding, profile_from_text


def dev_node_topo() -> str:
    """SYNTHETIC `nvidia-smi topo -m` for a dev-cluster node (2 sockets x 8 cores, 8 GPUs): GPU0-3 on CPUs 0-7 /
    NUMA 0, GPU4-7 on CPUs 8-15 / NUMA 1; NVLink pairs (0,1), (2,3), ... and PCIe otherwise."""
    cols = [f"GPU{i}" for i in range(8)]
    rows = ["\t" + "\t".join(cols) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i in range(8):
        cells = [" X " if i == j else "NV12" if i // 2 == j // 2 else "NODE" if i // 4 == j // 4 else "SYS"
                 for j in range(8)]
        rows.append("\t".join([f"GPU{i}", *cells, "0-7" if i < 4 else "8-15", str(i // 4), "", "N/A"]))
    return "\n".join(rows) + "\n"


@pytest.mark.integration
@pytest.mark.parametrize("k,expect", [(2, [[0, 1], [2, 3], [4, 5], [6, 7]]), (1, [[i] for i in range(8)]),
                                      (4, [[0, 1, 2, 3], [4, 5, 6, 7]])])
def test_plan_runs_and_each_task_sees_its_gpus(clean, tmp_path, k, expect):
    plan = plan_binding(profile_from_text(dev_node_topo(), path="synthetic-dev-node"), k)
    assert [t["gpus"] for t in plan["tasks"]] == expect
    out = tmp_path / "bind.out"
    script = "#!/bin/sh\n" + "".join(f"#SBATCH {o}\n" for o in plan["sbatch"]) + \
        f"srun {' '.join(plan['srun'])} sh -c 'echo task=$SLURM_LOCALID gpus=$CUDA_VISIBLE_DEVICES'\n"
    job = clean.sbatch(script, "-o", str(out))
    st = clean.wait_job(job, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and out.read_text().count("task=") < len(expect):
        time.sleep(0.2)
    text = out.read_text()
    assert st.state == "COMPLETED", text
    seen = {int(m.group(1)): [int(g) for g in m.group(2).split(",")]
            for m in re.finditer(r"task=(\d+) gpus=([\d,]+)", text)}
    assert seen == dict(enumerate(expect)), text
