# slurmkit render / submit: a job spec in, a topology-aware, preemption-safe sbatch script out.
step "slurmkit render: the 2-node torchrun example (binding from the dev partition's topology profile)"
$sk -v render examples/torchrun-2node.yaml

step "slurmkit submit: the 6-point sweep, with a stand-in command that prints its values"
sweep_out=$SLURMKIT_DEV_DIR/demo-sweep
mkdir -p "$sweep_out"
job=$($sk submit examples/sweep.yaml --set 'command=echo "task $SLURM_ARRAY_TASK_ID on $SLURMD_NODENAME: LR=$LR SEED=$SEED GPUs=$CUDA_VISIBLE_DEVICES CPUs=$SLURM_CPUS_ON_NODE"' \
      --set "output=$sweep_out/%a.out")
echo "submitted array job $job"
for _ in $(seq 100); do [ "$(ls "$sweep_out" | wc -l)" -ge 6 ] && [ -z "$(squeue -h -j "$job")" ] && break; sleep 0.3; done
cat "$sweep_out"/*.out

step "slurmkit submit: a request the cluster cannot hold is refused before sbatch (exit 2)"
$sk submit examples/finetune-1gpu.yaml --set gpus_per_node=16 || echo "(exit $?)"

step "slurmkit submit: an afterok chain: the eval job waits (Reason=Dependency) until its training job completed"
chain_out=$SLURMKIT_DEV_DIR/demo-chain
mkdir -p "$chain_out"
train=$($sk submit examples/eval-after-train.yaml --set name=demo-train --set mem=1G --set 'setup=[]' \
        --set 'command=sleep 4; echo "trained on $SLURMD_NODENAME"' --set "output=$chain_out/train.out")
eval=$($sk submit examples/eval-after-train.yaml --set dependency="$train" --set mem=1G --set 'setup=[]' \
       --set 'command=echo "eval ran after job $SLURM_JOB_DEPENDENCY"' --set "output=$chain_out/eval.out")
echo "training job $train, eval job $eval"
squeue -h -j "$eval" -o "eval job %i: %T (%r)"
for _ in $(seq 100); do [ -z "$(squeue -h -j "$train,$eval")" ] && break; sleep 0.3; done
cat "$chain_out/train.out" "$chain_out/eval.out"
