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

# Each capability adds its part of the demo as dev/demo.d/NN-name.sh, sourced in order (step, $sk, $py available).
for part in dev/demo.d/*.sh; do
    # shellcheck disable=SC1090
    . "$part"
done

if [ "$keep" = "--keep" ]; then
    printf '\nThe cluster is still up: source %s/env.sh to use it; stop it with\n  %s dev/cluster.py down\n' \
        "$SLURMKIT_DEV_DIR" "$py"
fi
