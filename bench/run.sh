#!/usr/bin/env bash
# Every benchmark, one after the other, each printing ratios measured side by side in the same run:
#     bash bench/run.sh            (or: bash bench/run.sh topo audit   to run some)
# Each starts (and stops) what it needs: its own dev Slurm cluster or loopback sshds. Figures: bench/RESULTS.md.
set -uo pipefail
cd "$(dirname "$0")/.."
bash dev/bootstrap.sh || exit 1
py=.venv/bin/python
all=(topo prolog audit checkpoint sync submit install kernlog parsers efficiency health fleetlog)
sel=("$@")
[ ${#sel[@]} -gt 0 ] || sel=("${all[@]}")
rc=0
for b in "${sel[@]}"; do
    printf '\n===== bench_%s =====\n' "$b"
    $py "bench/bench_$b.py" || { echo "bench_$b failed" >&2; rc=1; }
done
exit $rc
