#!/usr/bin/env bash
# The test command: install what is missing, start a dev Slurm cluster of its own, run unit and integration
# tests against it, and tear the cluster down even when tests fail. Extra arguments go to pytest.
#
#   bash dev/test.sh                     # every Slurm version: the full suite on 22.05 (the host's), then unit
#                                        # tests + the compatibility subset (-m compat) on 24.11 and 26.05
#   bash dev/test.sh --slurm 24.11 ...   # one version (repeat --slurm for several); pytest args after it
#   bash dev/test.sh --slurm 24.11 --full  # the whole suite on a newer version, not only the subset
#   bash dev/test.sh --agent ...         # the clusters run the hook agent: slurmd's hooks go through it
#
# 22.05 runs pytest on the host's .venv. 24.11/26.05 run pytest itself inside that version's root fs
# (dev/rootfs.py), on its Python (3.13, 3.14) and venv (.venv-24.11, .venv-26.05): sbatch, scontrol, sshd and
# moto are then native there, as they are for 22.05 on the host. Each version gets its own cluster directory
# ($SLURMKIT_TEST_DIR for 22.05, $SLURMKIT_TEST_DIR-<version> for the others) and port ($SLURMKIT_TEST_PORT,
# +20, +40); they run one after another (2 cores). Exit 0 only when every version's run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

versions=()
full=0
agent=()
while [ $# -gt 0 ]; do
    case $1 in
        --slurm) versions+=("${2:?--slurm needs a version}"); shift 2 ;;
        --slurm=*) versions+=("${1#--slurm=}"); shift ;;
        --full) full=1; shift ;;
        --agent) agent=(--agent); shift ;;
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

# the newer versions' root fs and venv (minutes on a fresh machine: debootstrap, pip) are made in the background
# while the first version's tests run; their turn waits for it (rootfs.py also locks each build)
prep=""
if [ ${#versions[@]} -gt 1 ] && [ "${versions[0]}" = 22.05 ]; then
    (
        for v in "${versions[@]}"; do
            [ "$v" = 22.05 ] || python3 dev/rootfs.py venv --slurm "$v" || exit 1
        done
    ) > "$base_dir-prepare.log" 2>&1 &
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
        if [ "$v" = 22.05 ]; then
            .venv/bin/python -m pytest -q -p no:cacheprovider "${sel[@]}" "$@"
        else
            venv=$(python3 dev/rootfs.py venv --slurm "$v") || exit 1
            python3 dev/rootfs.py run --slurm "$v" -- "$venv/bin/python" -m pytest -q -p no:cacheprovider \
                "${sel[@]}" "$@"
        fi
    )
    rc=$?
    if [ $rc -eq 5 ]; then echo "[test] Slurm $v: no tests ran" >&2; rc=1; fi
    python3 dev/cluster.py --dir "$dir" down || true
    return $rc
}

overall=0
summary=""
for v in "${versions[@]}"; do
    t0=$SECONDS
    run_version "$v" "$@"
    rc=$?
    [ $rc -eq 0 ] || overall=1
    summary+="  Slurm $v: $([ $rc -eq 0 ] && echo passed || echo "FAILED (rc=$rc)") in $((SECONDS - t0))s"$'\n'
done
printf '[test] results:\n%s' "$summary" >&2
exit $overall
