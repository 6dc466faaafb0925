#!/usr/bin/env bash
# The test command: install what is missing, start a dev Slurm cluster of its own, run unit and integration
# tests against it, and tear the cluster down even when tests fail. Extra arguments go to pytest.
#
#   bash dev/test.sh                     # every Slurm version: the full suite on 22.05 (the host's), then unit
#                                        # tests + the compatibility subset (-m compat) on 24.11 and 26.05
#   bash dev/test.sh --slurm 24.11 ...   # one version (repeat --slurm for several); pytest args after it
#   bash dev/test.sh --slurm 24.11 --full  # the whole suite on a newer version, not only the subset
#   bash dev/test.sh --agent ...         # the clusters run the hook agent: slurmd's hooks go through it
#   bash dev/test.sh --lanes             # 22.05 beside 24.11-then-26.05 (default: one after another)
#
# 22.05 runs pytest on the host's .venv. 24.11/26.05 run pytest itself inside that version's root fs
# (dev/rootfs.py), on its Python (3.13, 3.14) and venv (.venv-24.11, .venv-26.05): sbatch, scontrol, sshd and
# moto are then native there, as they are for 22.05 on the host. Each version gets its own cluster directory
# ($SLURMKIT_TEST_DIR for 22.05, $SLURMKIT_TEST_DIR-<version> for the others) and port ($SLURMKIT_TEST_PORT,
# +20, +40). With --lanes the run has two lanes side by side (not yet the default: not yet timed or
# proven free of timing flakes over a whole run): 22.05 (the full suite) in one, 24.11 then 26.05 in the
# other (its output in $SLURMKIT_TEST_DIR-newer.log, shown once 22.05 is done). Their tests mostly wait on Slurm
# (a 2-core machine ran at a load of 0.8 with one lane): 55 minutes one after another; the longest lane alone is about 30.
# Exit 0 only when every version's run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

versions=()
full=0
lanes_asked=0
agent=()
while [ $# -gt 0 ]; do
    case $1 in
        --slurm) versions+=("${2:?--slurm needs a version}"); shift 2 ;;
        --slurm=*) versions+=("${1#--slurm=}"); shift ;;
        --full) full=1; shift ;;
        --agent) agent=(--agent); shift ;;
        --lanes) lanes_asked=1; shift ;;
        *) break ;;
    esac
done
[ ${#versions[@]} -gt 0 ] || versions=(22.05 24.11 26.05)
for v in "${versions[@]}"; do
    case $v in
        22.05|24.11|26.05) ;;
        *) echo "dev/test.sh: unknown Slurm version '$v' (22.05, 24.11, 26.05)" >&2; exit 2 ;;
    esac
done

bash dev/bootstrap.sh || exit 1
if [ -d ../shared/fixtures ]; then
    .venv/bin/python dev/fixtures.py check || exit 1
fi
# every kernel-log, nvidia-smi and NCCL fixture whose provenance states a verdict: no miss, no false drain
.venv/bin/python dev/fixtures.py grade --quiet || exit 1

base_dir=${SLURMKIT_TEST_DIR:-/tmp/slurmkit-test}
base_port=${SLURMKIT_TEST_PORT:-6917}
started=()
cleanup() {
    for d in "${started[@]}"; do python3 dev/cluster.py --dir "$d" down >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

lanes=0
[ ${#versions[@]} -gt 1 ] && [ "${versions[0]}" = 22.05 ] && [ "$lanes_asked" -eq 1 ] && lanes=1

# the newer versions' root fs and venv (minutes on a fresh machine: debootstrap, pip) are made in the background
# while the first version's tests run; their turn waits for it (rootfs.py also locks each build). With two lanes,
# the second lane makes them first itself.
prepare() {
    for v in "$@"; do
        [ "$v" = 22.05 ] || python3 dev/rootfs.py venv --slurm "$v" || return 1
    done
}
prep=""
if [ ${#versions[@]} -gt 1 ] && [ "${versions[0]}" = 22.05 ] && [ $lanes -eq 0 ]; then
    prepare "${versions[@]:1}" > "$base_dir-prepare.log" 2>&1 &
    prep=$!
    echo "[test] preparing the root fs of ${versions[*]:1} in the background (log: $base_dir-prepare.log)" >&2
fi

# run_version VERSION [pytest args]: its own cluster up, pytest where that version's tools are, cluster down
run_version() {
    local v=$1 i dir port rc
    shift
    case $v in 22.05) i=0 ;; 24.11) i=1 ;; 26.05) i=2 ;; esac
    dir=$base_dir; [ "$i" -eq 0 ] || dir=$base_dir-$v
    port=$((base_port + 20 * i))
    if [ "$v" != 22.05 ] && [ -n "$prep" ]; then
        wait "$prep" || echo "[test] preparing the root filesystems failed: see $base_dir-prepare.log" >&2
        prep=""
    fi
    echo "[test] Slurm $v: cluster $dir, port $port" >&2
    python3 dev/cluster.py --dir "$dir" down >/dev/null 2>&1 || true
    started+=("$dir")
    # a cluster that cannot start (no root fs, no packages) fails this version: never a skip
    if ! python3 dev/cluster.py --dir "$dir" up --slurm "$v" --port "$port" "${agent[@]}"; then
        echo "[test] Slurm $v: cluster did not start" >&2
        return 1
    fi
    local sel=()
    # the newer versions: every unit test (on that Python) + the integration tests marked compat
    [ "$v" = 22.05 ] || [ "$full" -eq 1 ] || sel=(-m "compat or not integration")
    (
        # shellcheck disable=SC1091
        . "$dir/env.sh"
        export SLURMKIT_DEV_DIR=$dir SLURMKIT_DEV_PORT=$port SLURMKIT_REQUIRE_CLUSTER=1
        # each version's ports: slurmctld port, slurmd +1..+4, test_topo_gres +5/+6, test_dev_cluster +10..+12,
        # moto's S3 +19 (a fixed S3 port collided between runs side by side)
        export SLURMKIT_TEST_S3_PORT=${SLURMKIT_TEST_S3_PORT:-$((port + 19))}
        export SLURMKIT_COMPAT_REPORT=$dir/compat.json
        # each version's pytest its own temporary root: two lanes' sessions never share (or clean up) one
        bt=--basetemp=$dir/pytest
        pt() {
            if [ "$v" = 22.05 ]; then
                .venv/bin/python -m pytest -q -p no:cacheprovider "$bt" "$@"
            else
                venv=$(python3 dev/rootfs.py venv --slurm "$v") || return 1
                python3 dev/rootfs.py run --slurm "$v" -- "$venv/bin/python" -m pytest -q -p no:cacheprovider "$bt" "$@"
            fi
        }
        if [ $# -gt 0 ]; then
            pt "${sel[@]}" "$@"
            exit
        fi
        # the whole run: the unit tests first, over 4 workers (most of their wall time is sleeps and child
        # processes, not CPU: 160 s -> 61 s on this 2-core machine), then the integration tests one at a time
        # (they share the one cluster and drain its nodes)
        integ=integration
        [ "$v" = 22.05 ] || [ "$full" -eq 1 ] || integ="integration and compat"
        pt -m "not integration" -n 4
        u=$?
        # the slowest tests by name at the end of each version's report: where the run's time goes
        pt -m "$integ" --durations=15 --durations-min=20
        i=$?
        [ $u -ne 0 ] && exit $u
        exit $i
    )
    rc=$?
    if [ $rc -eq 5 ]; then echo "[test] Slurm $v: no tests ran" >&2; rc=1; fi
    python3 dev/cluster.py --dir "$dir" down || true
    return $rc
}

# run_versions V...: each in turn; the summary lines in $summary, 1 when any failed
run_versions() {
    local v t0 rc failed=0
    for v in "$@"; do
        t0=$SECONDS
        run_version "$v" "${pytest_args[@]}"
        rc=$?
        [ $rc -eq 0 ] || failed=1
        summary+="  Slurm $v: $([ $rc -eq 0 ] && echo passed || echo "FAILED (rc=$rc)") in $((SECONDS - t0))s"$'\n'
    done
    return $failed
}

pytest_args=("$@")
overall=0
summary=""
if [ $lanes -eq 1 ]; then
    newer=("${versions[@]:1}")
    lane_log=$base_dir-newer.log
    (
        started=()
        trap cleanup EXIT
        summary=""
        if ! prepare "${newer[@]}" >/dev/null; then
            echo "[test] preparing the root filesystems of ${newer[*]} failed" >&2
            printf '  Slurm %s: FAILED (no root fs)\n' "${newer[@]}" > "$base_dir-newer.summary"
            exit 1
        fi
        run_versions "${newer[@]}"
        rc=$?
        printf '%s' "$summary" > "$base_dir-newer.summary"
        exit $rc
    ) > "$lane_log" 2>&1 &
    lane=$!
    echo "[test] Slurm ${newer[*]} run beside 22.05 (output: $lane_log, shown when 22.05 is done)" >&2
    run_versions 22.05 || overall=1
    echo "[test] Slurm ${newer[*]}, beside 22.05 (from $lane_log):" >&2
    tail -n +1 --pid="$lane" -f "$lane_log"
    wait "$lane" || overall=1
    summary+=$(cat "$base_dir-newer.summary" 2>/dev/null || echo "  Slurm ${newer[*]}: FAILED (no summary)")$'\n'
else
    run_versions "${versions[@]}" || overall=1
fi
printf '[test] results:\n%s' "$summary" >&2
exit $overall
