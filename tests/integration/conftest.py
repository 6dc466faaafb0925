"""Integration tests run against the real dev cluster (dev/cluster.py up) named by $SLURM_CONF.

`bash dev/test.sh` starts the cluster, exports its environment, runs the tests and tears the cluster down. Run
alone, these tests are skipped without a cluster, unless SLURMKIT_REQUIRE_CLUSTER=1 (set by dev/test.sh and CI),
where a missing cluster is a failure.

The cluster says which Slurm it runs ($SLURMKIT_DEV_SLURM from its env.sh: 22.05, 24.11 or 26.05; `cluster.slurm`)
and the fixture checks that the Slurm tools this test process finds are that version: a test run meant for 24.11
that reaches the host's 22.05 tools fails instead of passing for the wrong version.
"""
import re
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.slurm.cli_backend import CliBackend

REPO = Path(__file__).resolve().parents[2]
NODES = ["n1", "n2", "n3", "n4"]


class Cluster:
    def __init__(self):
        self.conf = Path(os.environ["SLURM_CONF"])
        self.dir = self.conf.parent
        self.site_config = Path(os.environ.get("SLURMKIT_CONFIG", self.dir / "slurmkit.yaml"))
        self.backend = CliBackend(timeout=15)
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), SLURMKIT_CONFIG=str(self.site_config))
        self.slurm = os.environ.get("SLURMKIT_DEV_SLURM", "22.05")

    def check_version(self):
        out = self.run("sinfo", "--version", timeout=30).stdout.strip()     # "slurm 22.05.8", "slurm-wlm 24.11.5"
        m = re.search(r"(\d+\.\d+)\.\d+", out)
        if not m or m.group(1) != self.slurm:
            pytest.fail(f"the cluster is Slurm {self.slurm} (SLURMKIT_DEV_SLURM) but sinfo here is {out!r}")

    def run(self, *argv, check=True, timeout=60, env=None, input=None):
        return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout,
                              env=env or self.env, input=input)

    def slurmkit(self, *args, check=False, timeout=60, env=None):
        return self.run(sys.executable, "-m", "slurmkit.cli", *args, check=check, timeout=timeout, env=env)

    def sbatch(self, script: str, *args) -> int:
        return self.backend.submit(script, args)

    def job_state(self, job_id: int) -> str:
        return self.backend.job(job_id).state

    def wait_job(self, job_id: int, states=("COMPLETED",), timeout=60.0, interval=0.3):
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            st = self.backend.job(job_id)
            if st.state in states:
                return st
            time.sleep(interval)
        raise AssertionError(f"job {job_id} not in {states} after {timeout}s: {st}")

    def wait_first_checkpoint(self, job_id: int, ck: Path, out: Path, timeout=60.0):
        """Wait until `slurmkit run`'s job has written its first checkpoint under `ck`. On timeout the failure says
        what the job record, the job's output and its node's slurmd log showed (a CI flake here once said only
        `None is not None`)."""
        from slurmkit import checkpoint

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if checkpoint.latest(str(ck)) is not None:
                return
            time.sleep(0.2)
        rec = self.backend.job(job_id)
        node = rec.raw.get("BatchHost") or rec.nodes
        text = out.read_text(errors="replace")[-2000:] if out.exists() else "(no output file)"
        log = self.dir / "log" / f"slurmd-{node}.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.is_file() else f"(no {log})"
        raise AssertionError(f"job {job_id} wrote no checkpoint under {ck} in {timeout:.0f}s: {rec}\n"
                             f"--- job output ---\n{text}\n--- {log.name} ---\n{tail}")

    def node(self, name):
        (rec,) = self.backend.nodes(name)
        return rec

    def wait_node(self, name, pred, timeout=30.0):
        deadline = time.monotonic() + timeout
        rec = None
        while time.monotonic() < deadline:
            rec = self.node(name)
            if pred(rec):
                return rec
            time.sleep(0.3)
        raise AssertionError(f"node {name} never matched: {rec}")

    def set_scenario(self, node, scenario):
        self.run(sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(self.dir), "scenario", node,
                 scenario)

    def reset(self):
        """Cancel our jobs, resume every drained node, put healthy scenarios back: each test starts clean."""
        self.run("scancel", "--full", "-p", "gpu", check=False)
        for n in NODES:
            self.set_scenario(n, "healthy-h100x8")
        for rec in self.backend.nodes():
            if rec.drained or rec.state == "DOWN":
                self.run("scontrol", "update", f"NodeName={rec.name}", "State=RESUME", check=False)
        self.wait_idle()

    def wait_idle(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            recs = self.backend.nodes()
            if all(r.state == "IDLE" and not r.flags for r in recs):
                return
            time.sleep(0.3)
        raise AssertionError("cluster not idle: " + json.dumps([r.to_dict() for r in self.backend.nodes()]))


@pytest.fixture(scope="session")
def cluster():
    conf = os.environ.get("SLURM_CONF")
    if not conf or not Path(conf).exists():
        if os.environ.get("SLURMKIT_REQUIRE_CLUSTER") == "1":
            pytest.fail("SLURMKIT_REQUIRE_CLUSTER=1 but no dev cluster: SLURM_CONF is unset or missing")
        pytest.skip("no dev cluster (run `bash dev/test.sh`, or `python3 dev/cluster.py up` and source env.sh)")
    c = Cluster()
    c.check_version()
    c.reset()
    return c


@pytest.fixture
def clean(cluster):
    cluster.reset()
    yield cluster
    cluster.reset()
