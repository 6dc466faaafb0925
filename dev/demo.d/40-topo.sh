# Topology: a real capture parsed, gres.conf generated with the right Cores=, binding planned, a damaged paste refused.
topo_fix=tests/fixtures/topo
step "slurmkit topo on a captured DGX-1 matrix (hybrid cube-mesh NVLink, old legend)"
$sk topo --topo-file $topo_fix/dgx1-v100-msccl-tools-4xmlx5-old-legend.txt

step "gres.conf for a Princeton H100 node: interleaved NUMA (node0 = even CPUs) mapped to Slurm cores 0-47/48-95"
$sk topo --topo-file $topo_fix/princeton-della-pli-h100-8gpu-nv18-6nic-odd-cpu-affinity.txt \
    --lscpu-file tests/fixtures/lscpu/princeton-pli-h100-node-xeon8468-lscpu.txt --gres-conf --node-name gpu01 2>/dev/null

step "Binding plan for 2 GPUs per task on an H20 node (what slurmkit submit uses)"
$py -c 'import json, sys
from slurmkit.topology import profile_from_text, plan_binding
p = plan_binding(profile_from_text(open(sys.argv[1]).read()), 2)
for t in p["tasks"]: print("task: gpus", t["gpus"], "nics", t["nics"], "cpus", len(t["cpus"]))
print("sbatch", " ".join(p["sbatch"])); print("env", p["env"])' $topo_fix/h20-8gpu-nv18-8nic-driver535-sglang-24966.txt

step "A paste that lost a tab is refused with its line (exit 2), never a wrong matrix"
$sk topo --topo-file $topo_fix/dgx-h100-12nic-vllm-13855-paste-merged-columns-gpu-rows.txt --json || echo "exit $?"
