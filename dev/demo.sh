#!/usr/bin/env bash
# The demo: a real local Slurm cluster (4 nodes x 8 fake GPUs), a job submitted, the nodes shown through slurmkit.
# `bash dev/demo.sh --keep` leaves the cluster up (tear it down with the command it prints).
set -euo pipefail
cd "$(dirname "$0")/.."
bash dev/bootstrap.sh
export SLURMKIT_DEV_DIR=${SLURMKIT_DEV_DIR:-/tmp/slurmkit-demo}
export SLURMKIT_DEV_PORT=${SLURMKIT_DEV_PORT:-6817}
py=.venv/bin/python
sk=.venv/bin/slurmkit
keep=${1:-}
$py dev/cluster.py down >/dev/null 2>&1 || true
[ "$keep" = "--keep" ] || trap '$py dev/cluster.py down' EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Start a local Slurm cluster: slurmctld + 4 slurmd nodes, 8 GPUs each (fake, replayed from captures)"
$py dev/cluster.py up
. "$SLURMKIT_DEV_DIR/env.sh"

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

if [ "$keep" = "--keep" ]; then
    printf '\nThe cluster is still up: source %s/env.sh to use it; stop it with\n  %s dev/cluster.py down\n' \
        "$SLURMKIT_DEV_DIR" "$py"
fi
