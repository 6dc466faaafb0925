#!/usr/bin/env bash
# The demo: a real local Slurm cluster (4 nodes x 8 fake GPUs), a job submitted, the nodes shown through slurmkit.
# `bash dev/demo.sh --keep` leaves the cluster up (tear it down with the command it prints).
# `bash dev/demo.sh --slurm 24.11` (or 26.05) runs it on that Slurm: the whole demo then runs inside that
# version's root fs (dev/rootfs.py), with slurmkit from the venv built on its Python (.venv-24.11).
set -euo pipefail
cd "$(dirname "$0")/.."
slurm=${SLURMKIT_DEV_SLURM:-22.05}
keep=""
while [ $# -gt 0 ]; do
    case $1 in
        --slurm) slurm=${2:?--slurm needs a version}; shift 2 ;;
        --slurm=*) slurm=${1#--slurm=}; shift ;;
        --keep) keep=--keep; shift ;;
        *) echo "usage: bash dev/demo.sh [--slurm 22.05|24.11|26.05] [--keep]" >&2; exit 2 ;;
    esac
done
case $slurm in 22.05|24.11|26.05) ;; *) echo "dev/demo.sh: unknown Slurm version '$slurm'" >&2; exit 2 ;; esac
if [ "$slurm" = 22.05 ]; then
    export SLURMKIT_DEV_DIR=${SLURMKIT_DEV_DIR:-/tmp/slurmkit-demo}
    bash dev/bootstrap.sh
    py=.venv/bin/python
    sk=.venv/bin/slurmkit
elif [ ! -e /etc/slurmkit-rootfs ]; then
    # on the host: build what the root fs run needs, then run this script again inside it
    export SLURMKIT_DEV_DIR=${SLURMKIT_DEV_DIR:-/tmp/slurmkit-demo-$slurm}
    bash dev/bootstrap.sh
    python3 dev/rootfs.py venv --slurm "$slurm" >/dev/null
    exec python3 dev/rootfs.py run --slurm "$slurm" -- bash dev/demo.sh --slurm "$slurm" $keep
else
    py=.venv-$slurm/bin/python
    sk=.venv-$slurm/bin/slurmkit
fi
export SLURMKIT_DEV_SLURM=$slurm
export SLURMKIT_DEV_PORT=${SLURMKIT_DEV_PORT:-6817}
$py dev/cluster.py down >/dev/null 2>&1 || true
[ "$keep" = "--keep" ] || trap '$py dev/cluster.py down' EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Start a local Slurm $slurm cluster: slurmctld + 4 slurmd nodes, 8 GPUs each (fake, replayed from captures)"
$py dev/cluster.py up --slurm "$slurm"
. "$SLURMKIT_DEV_DIR/env.sh"

# Each capability adds its part of the demo as dev/demo.d/NN-name.sh, sourced in order (step, $sk, $py available).
for part in dev/demo.d/*.sh; do
    # shellcheck disable=SC1090
    . "$part"
done

if [ "$keep" = "--keep" ]; then
    printf '\nThe cluster is still up: source %s/env.sh to use it; stop it with\n  python3 dev/cluster.py --dir %s down\n' \
        "$SLURMKIT_DEV_DIR" "$SLURMKIT_DEV_DIR"
    [ "$slurm" = 22.05 ] || printf 'Slurm %s clients run inside its root fs: python3 dev/rootfs.py run --slurm %s -- sinfo\n' \
        "$slurm" "$slurm"
fi
