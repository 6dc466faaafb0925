#!/usr/bin/env bash
# The test command: install what is missing, start a dev Slurm cluster of its own, run unit and integration
# tests against it, and tear the cluster down even when tests fail. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash dev/bootstrap.sh || exit 1

export SLURMKIT_DEV_DIR=${SLURMKIT_TEST_DIR:-/tmp/slurmkit-test}
export SLURMKIT_DEV_PORT=${SLURMKIT_TEST_PORT:-6917}
py=.venv/bin/python
$py dev/cluster.py down >/dev/null 2>&1 || true
trap '$py dev/cluster.py down' EXIT
$py dev/cluster.py up || exit 1
# shellcheck disable=SC1091
. "$SLURMKIT_DEV_DIR/env.sh"
export SLURMKIT_REQUIRE_CLUSTER=1

if [ -d ../shared/fixtures ]; then
    $py dev/fixtures.py check || exit 1
fi
$py dev/fixtures.py grade --quiet || exit 1
$py -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "no tests ran" >&2; rc=1; fi
exit $rc
