#!/usr/bin/env bash
# Every benchmark, one after the other, each printing ratios measured side by side in the same run:
#     bash bench/run.sh            (or: bash bench/run.sh topo audit   to run some)
# Each prints its target and met/missed where issue 18 or bench/RESULTS.md states one.
# Each starts (and stops) what it needs: its own dev Slurm cluster or loopback sshds. Figures: bench/RESULTS.md.
set -uo pipefail
cd "$(dirname "$0")/.."
bash dev/bootstrap.sh || exit 1
py=.venv/bin/python
# the anchors the benchmarks compare against (submitit for bench_submit): installed, never skipped
$py -c 'import submitit' 2>/dev/null || $py -m pip install -q --disable-pip-version-check -e '.[test,bench]' ||
    { echo "cannot install slurmkit[bench]" >&2; exit 1; }
$py -c 'import submitit' || { echo "submitit (the bench extra) does not import" >&2; exit 1; }
# bench_hook_cpu counts instructions with valgrind (callgrind): installed where apt can, else it says so and fails
command -v valgrind >/dev/null || { command -v apt-get >/dev/null && apt-get install -y -q valgrind >/dev/null 2>&1; } || true
all=(topo prolog prolog_nvml hook_cpu audit checkpoint sync submit install kernlog parsers efficiency health fleetlog replicate)
sel=("$@")
[ ${#sel[@]} -gt 0 ] || sel=("${all[@]}")
rc=0
for b in "${sel[@]}"; do
    printf '\n===== bench_%s =====\n' "$b"
    $py "bench/bench_$b.py" || { echo "bench_$b failed" >&2; rc=1; }
done
exit $rc
