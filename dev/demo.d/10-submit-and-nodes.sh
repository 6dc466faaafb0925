# A plain job through sbatch, and the cluster as `slurmkit nodes` shows it.
step "Submit a 2-GPU job"
out=$SLURMKIT_DEV_DIR/demo-job.out
job=$(printf '#!/bin/sh\necho "job $SLURM_JOB_ID on $SLURMD_NODENAME sees GPUs $CUDA_VISIBLE_DEVICES"\nsleep 3\n' |
      sbatch --parsable --gpus-per-node=2 --output="$out")
echo "submitted job $job"
for _ in $(seq 50); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.2; done

step "slurmkit nodes (while the job runs)"
$sk nodes

step "The job's output"
for _ in $(seq 50); do [ -s "$out" ] && break; sleep 0.2; done
cat "$out"

step "slurmkit jobs --all and slurmkit logs: the job as its owner sees it (state, nodes, GPUs; its output)"
$sk jobs --all
$sk logs "$job" -n 5
