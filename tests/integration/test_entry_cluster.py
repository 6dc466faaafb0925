"""The lean entry (slurmkit/entry.py) on the real dev cluster: `nodes`, `audit` and a new spec's `submit` through
the fast path print what the click CLI prints, byte for byte, and exit as it exits (the same command lines, run
as `python -m slurmkit` and as `python -m slurmkit.cli`, the click CLI)."""
import sys

import pytest

ADMIN = "admin: fan swap (entry test)"
SPEC = """name: entry-test
partition: gpu
gpus_per_node: 1
cpus_per_gpu: 2
time: "5:00"
command: [true]
output: /dev/null
sbatch: [--hold]
"""


def both(c, *argv, **kw):
    fast = c.run(sys.executable, "-m", "slurmkit", *argv, check=False, **kw)
    slow = c.slurmkit(*argv, **kw)
    return (fast.returncode, fast.stdout, fast.stderr), (slow.returncode, slow.stdout, slow.stderr)


@pytest.fixture
def drained_n2(clean):
    clean.run("scontrol", "update", "NodeName=n2", "State=DRAIN", f"Reason={ADMIN}")
    clean.wait_node("n2", lambda r: r.drained)
    return clean


@pytest.mark.parametrize("argv", [
    ["nodes"], ["nodes", "--json"], ["nodes", "n[1-2]"], ["nodes", "--json", "n3"], ["nodes", "nosuch"],
    ["nodes", "n[1-"],
    ["audit", "--now", "2030-01-01T00:00:00"], ["audit", "--json", "--now", "2030-01-01T00:00:00"],
    ["audit", "--csv", "-p", "gpu", "--now", "2030-01-01T00:00:00"], ["audit", "--since", "5000d", "--json", "--now", "2030-01-01T00:00:00"],
    # every audit at a fixed --now: its report says when it ran, to the second, and the two runs may straddle one
    ["audit", "-p", "nosuch", "--json", "--now", "2030-01-01T00:00:00"], ["audit", "--json", "--csv"],
])
def test_nodes_and_audit_through_the_fast_path_read_as_through_click(drained_n2, argv):
    fast, slow = both(drained_n2, *argv)
    assert fast == slow
    if argv[0] == "audit" and "nosuch" not in argv and fast[0] != 2:
        assert fast[0] == 1 and "n2" in fast[1]                   # the drained node is there


def test_a_new_spec_submits_through_the_fast_path_as_through_click(clean, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    for i, extra in enumerate([[], ["--json"], ["--dry-run"], ["--set", "gpus_per_node=99"]]):
        argv = ["submit", str(spec), "--set", f"env.ENTRY_RUN={i}", *extra]
        fast, slow = both(clean, *argv, env=dict(clean.env, SLURMKIT_NO_CACHE="1"))
        assert fast[0] == slow[0] and fast[2] == slow[2]
        if "--json" in extra:
            import json
            a, b = json.loads(fast[1]), json.loads(slow[1])
            assert a["script"] == b["script"] and b["job_id"] == a["job_id"] + 1   # two real submissions
        elif extra == []:
            assert int(slow[1]) == int(fast[1]) + 1
        else:
            assert fast[1] == slow[1]
    clean.run("scancel", "--name", "entry-test", check=False)
