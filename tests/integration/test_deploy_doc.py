"""docs/deploy.md, run as written: its marked command blocks (`<!-- deploy: NAME -->` before a ```bash fence), in
the page's order, against the dev cluster, from a slurmkit wheel installed in a fresh venv (not the checkout),
with the install going to real sshd "nodes" (dev/sshfleet.py). Between the blocks the test only does what the
page says happens on its own (a GPU fails: here a fake-GPU scenario) and checks what an admin would look at."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "deploy.md"
sys.path.insert(0, str(REPO / "dev"))
from sshfleet import Fleet  # noqa: E402

NODES = ["n1", "n2", "n3", "n4"]
STEPS = ["admin-venv", "override", "dry-run", "wrappers", "install", "slurm-conf", "job", "audit", "uninstall"]
BASE_PORT = int(os.environ.get("SLURMKIT_TEST_SSH_PORT", "7474")) + 10   # beside test_install.py's fleet


def page_blocks(text: str) -> dict[str, str]:
    """NAME -> the bash text of each marked block, in page order."""
    pat = re.compile(r"^<!-- deploy: ([\w-]+) -->\n```bash\n(.*?)^```$", re.M | re.S)
    return {m.group(1): m.group(2) for m in pat.finditer(text)}


def test_the_page_marks_exactly_the_steps_the_deploy_test_runs():
    blocks = page_blocks(PAGE.read_text())
    assert list(blocks) == STEPS
    assert PAGE.read_text().count("<!-- deploy:") == len(STEPS)   # no marker whose block the pattern missed


def site_config(cluster, fleet: Fleet, wrappers: Path) -> str:
    """The dev cluster's site config as an admin would write it for installed nodes: fake GPU tools as argv
    lists (no wrapper script), the default audit.recheck_command, and an install section reaching the fleet."""
    doc = yaml.safe_load(cluster.site_config.read_text())
    fake = REPO / "dev" / "fakegpu" / "bin"
    env = ["env", f"SLURMKIT_FAKEGPU_DIR={cluster.dir / 'fakegpu'}"]
    doc["tools"] = {t: [*env, str(fake / t.replace("nvidia_smi", "nvidia-smi"))]
                    for t in ("nvidia_smi", "dmesg", "all_reduce_perf", "dcgmi")}
    doc["audit"].pop("recheck_command")
    doc["install"] = {**yaml.safe_load(fleet.install_config())["install"],
                      "slurm_prolog": str(wrappers / "slurmkit-prolog"),
                      "slurm_epilog": str(wrappers / "slurmkit-epilog"),
                      "slurm_health": str(wrappers / "slurmkit-health")}
    return yaml.safe_dump(doc, sort_keys=False)


def test_deploy_page_from_a_wheel_to_drain_and_resume(clean, tmp_path):
    c = clean
    blocks = page_blocks(PAGE.read_text())
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
                   check=True, timeout=300, capture_output=True)
    (wheel,) = dist.glob("slurmkit-*.whl")
    fleet = Fleet(tmp_path / "fleet", NODES, BASE_PORT).start()
    conf_before = c.conf.read_text()
    wrappers = tmp_path / "wrappers"
    wrappers.mkdir()
    cfg = tmp_path / "site.yaml"
    cfg.write_text(site_config(c, fleet, wrappers))
    admin = tmp_path / "admin-venv"
    env = {k: v for k, v in c.env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(ADMIN_VENV=str(admin), WHEEL=str(wheel), SLURMKIT_CONFIG=str(cfg), NODES="n[1-4]", NODE="n1",
               WRAPPER_DIR=str(wrappers), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PATH=f"{admin / 'bin'}:{env['PATH']}")

    def step(name, **more):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", blocks[name]], cwd=tmp_path, env={**env, **more},
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"step {name}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    try:
        r = step("admin-venv")
        assert r.stdout.strip().endswith("slurmkit, version " + wheel.name.split("-")[1])
        where = subprocess.run([str(admin / "bin" / "python"), "-c",
                                "import slurmkit.install.bundle as b; print(b.source_tree(), b.__file__)"],
                               capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert where.stdout.split()[0] == "None" and str(admin) in where.stdout   # not the checkout
        # a fault replayed from the wheel alone (docs/fakegpu.md): its fake tools and a real capture, no checkout
        fake = admin / "share" / "slurmkit" / "fakegpu"
        trial = tmp_path / "trial.yaml"
        trial.write_text(f"tools:\n  dmesg: [env, SLURMKIT_FAKEGPU_SCENARIO={fake}/scenarios/xid79, {fake}/bin/dmesg]\n")
        r = subprocess.run(["slurmkit", "--config", str(trial), "check", "--only", "xid", "--node", "trial01"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert r.returncode == 1 and "GPU 0000:5d:00 fell off the bus" in r.stdout, r.stdout + r.stderr

        r = step("override")           # one node's own setting: shown with where it came from
        row = next(ln for ln in r.stdout.splitlines() if ln.startswith("nvlink.error_threshold "))
        assert row.split()[1] == "5000" and row.endswith("(overrides[0] nodes n1)"), r.stdout

        r = step("dry-run")
        assert [ln.split()[1] for ln in r.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in NODES] == ["would-change"] * 4
        assert not (fleet.node_root("n1") / "etc").exists()

        step("wrappers")
        r = step("install")
        rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in NODES}
        assert {n: row[1] for n, row in rows.items()} == dict.fromkeys(NODES, "changed"), r.stdout
        assert "check ok" in r.stdout
        # the installed prolog is the one the wheel carries, behind its install preamble
        prolog = (fleet.node_root("n3") / "etc/slurm/slurmkit/prolog").read_text()
        assert prolog.endswith((REPO / "prolog" / "prolog").read_text().split("\n", 1)[1])
        # the override took effect on n1 only: each node's installed slurmkit reads its own merged config
        for n, want in (("n1", "5000"), ("n2", "1000")):
            root = fleet.node_root(n)
            got = subprocess.run([str(root / "opt/slurmkit/venv/bin/slurmkit"), "--config",
                                  str(root / "etc/slurmkit/config.yaml"), "config", "--node", n, "--features", ""],
                                 capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
            row = next(ln for ln in got.stdout.splitlines() if ln.startswith("nvlink.error_threshold "))
            assert row.split()[1] == want, (n, got.stdout, got.stderr)

        r = step("slurm-conf")
        conf = c.conf.read_text()
        assert f"Prolog={wrappers}/slurmkit-prolog\n" in conf and f"Epilog={wrappers}/slurmkit-epilog\n" in conf
        assert f"HealthCheckProgram={wrappers}/slurmkit-health\n" in conf and "HealthCheckNodeState=ANY,CYCLE\n" in conf
        sched = [ln for ln in conf.splitlines() if ln.startswith("SchedulerParameters=")]
        assert sched == ["SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,sched_interval=2,"
                         "nohold_on_prolog_fail"]                 # the cluster's own parameters kept
        show = c.run("scontrol", "show", "config").stdout
        assert re.search(rf"^Prolog\s+= {re.escape(str(wrappers))}/slurmkit-prolog$", show, re.M)
        # applied as printed: a rerun finds nothing to change and nothing missing in slurm.conf
        r = subprocess.run(["slurmkit", "install", "--nodes", "n[1-4]"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "lacks" not in r.stderr, r.stderr
        assert r.stdout.count("unchanged") == 4

        t0 = time.time()
        step("job")
        from slurmkit import healthlog
        recs = list(healthlog.read(yaml.safe_load(cfg.read_text())["paths"]["health_log"]))
        assert any(x["node"] == "n1" and x["context"] == "prolog" and x.get("job_id") for x in recs
                   if x.get("time", "") >= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 - 1))), recs[-5:]

        # a GPU falls off the bus on n2: the installed prolog drains it and the job runs elsewhere
        c.set_scenario("n2", "xid79")
        job = c.sbatch("#!/bin/sh\nsleep 1\n", "-w", "n2", "-o", "/dev/null")
        rec = c.wait_node("n2", lambda r: r.drained and r.reason.startswith("slurmkit:xid79"), timeout=90)
        c.set_scenario("n2", "healthy-h100x8")          # the repair
        r = step("audit", NODE="n2")
        assert "n2" in r.stdout and "xid79" in r.stdout
        assert "n2: resumed: check xid passed" in r.stdout, r.stdout + r.stderr
        c.wait_node("n2", lambda r: not r.drained, timeout=30)
        assert rec.reason.startswith("slurmkit:xid79")
        c.run("scancel", str(job), check=False)

        r = step("uninstall")
        assert "would-change" in r.stdout and r.stdout.count(" removed ") == 4, r.stdout
        for n in NODES:
            assert not fleet.node_root(n).exists(), n       # nothing of slurmkit left on any node
        assert list(wrappers.iterdir()) == []
        assert c.conf.read_text() == conf_before
    finally:
        c.conf.write_text(conf_before)
        c.run("scontrol", "reconfigure", check=False)
        fleet.stop()
