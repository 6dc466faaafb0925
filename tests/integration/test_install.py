"""`slurmkit install` against real sshd daemons on loopback ports (one per pretend node, started here, stopped by
pid even when a test fails), and the dev cluster's slurmd running the prolog it installed.

Each node installs under <tmp>/nodes/<node>/ (install.root) since all "nodes" share this machine's filesystem.
"""
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev"))
from sshfleet import Fleet  # noqa: E402

BASE_PORT = int(os.environ.get("SLURMKIT_TEST_SSH_PORT", "7474"))
NODES = ["n1", "n2", "n3", "n4"]
PROLOG_V1 = "#!/bin/sh\n# test prolog v1\nexit 0\n"
PROLOG_V2 = "#!/bin/sh\n# test prolog v2\nexit 0\n"



@pytest.fixture(autouse=True)
def _sshd_present():
    """Without sshd these tests cannot run: a skip locally, a failure where a cluster is required (CI)."""
    if not Path("/usr/sbin/sshd").exists():
        if os.environ.get("SLURMKIT_REQUIRE_CLUSTER") == "1":
            pytest.fail("SLURMKIT_REQUIRE_CLUSTER=1 but /usr/sbin/sshd is missing (openssh-server)")
        pytest.skip("needs openssh-server (bootstrap)")


class Site:
    """A fleet of sshds plus a site config that reaches them; `install(...)` runs the CLI as an admin would."""

    def __init__(self, tmp: Path, fleet: Fleet):
        self.tmp, self.fleet = tmp, fleet
        self.prolog = tmp / "src" / "prolog"
        self.prolog.parent.mkdir(parents=True, exist_ok=True)
        self.prolog.write_text(PROLOG_V1)
        self.config = tmp / "site.yaml"
        self.write_config()

    def write_config(self, extra: str = "", **install):
        self.config.write_text("slurm:\n  timeout: 10\n"
                               + self.fleet.install_config(prolog_src=str(self.prolog), **install) + extra)

    def install(self, *args, timeout=300, env=None):
        env = {**os.environ, **(env or {})}
        env.pop("SLURMKIT_CONFIG", None)
        # not `-m slurmkit.cli`: run as __main__, cli.py would define a second Ctx class the commands don't know
        r = subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(self.config), "install", *args],
                           capture_output=True, text=True, timeout=timeout, env=env)
        doc = json.loads(r.stdout) if "--json" in args and r.stdout.strip().startswith("{") else None
        return r, doc

    def root(self, node) -> Path:
        return self.fleet.node_root(node)

    def path(self, node, p) -> Path:
        return self.root(node) / p.lstrip("/")


@pytest.fixture
def site(tmp_path):
    fleet = Fleet(tmp_path / "fleet", NODES, BASE_PORT)
    fleet.start()
    try:
        yield Site(tmp_path, fleet)
    finally:
        fleet.stop()
        for n in NODES:  # an immutable dir left by a failed test would outlive it
            d = fleet.node_root(n) / "etc" / "slurm" / "slurmkit"
            if d.exists():
                subprocess.run(["chattr", "-i", str(d)], capture_output=True, timeout=10)


def by_node(doc):
    return {n["node"]: n for n in doc["nodes"]}


def staged_leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if ".slurmkit-tmp-" in p.name)


def snapshot(root: Path, dirs=True) -> dict[str, tuple[int, int]]:
    """inode and mtime of everything under root (a directory's mtime moves when a staged file came and went)."""
    return {str(p): (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in root.rglob("*")
            if dirs or p.is_symlink() or not p.is_dir()}


@pytest.mark.compat("install")
def test_install_to_all_then_a_rerun_changes_nothing(site):
    r, doc = site.install("--nodes", "n[1-4]", "--json")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    summary = {k: doc["summary"][k] for k in ("nodes", "ok", "failed", "by_status", "failed_nodes", "retry", "waves")}
    assert doc["ok"] and summary == {"nodes": 4, "ok": 4, "failed": 0, "by_status": {"changed": 4},
                                     "failed_nodes": "", "retry": None, "waves": 1}
    cfg = site.config.read_bytes()
    for n in NODES:
        prolog = site.path(n, "/etc/slurm/slurmkit/prolog")
        text = prolog.read_text()
        assert text.startswith("#!/bin/sh\n") and text.endswith(PROLOG_V1.split("\n", 1)[1])
        assert f"SLURMKIT_PYTHON:={site.root(n)}/opt/slurmkit/venv/bin/python" in text
        st = prolog.stat()
        assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o755, 0, 0)
        assert site.path(n, "/etc/slurm/slurmkit/epilog").read_text().endswith(
            (REPO / "epilog" / "epilog").read_text().split("\n", 1)[1])
        assert site.path(n, "/etc/slurmkit/config.yaml").read_bytes() == cfg
        assert site.path(n, "/etc/slurmkit/config.yaml").stat().st_mode & 0o777 == 0o644
        # the node's settings file: the same config through the one loader, stamped with its sha256, root's 0644
        node_settings = site.path(n, "/etc/slurmkit/config.settings.json")
        st = node_settings.stat()
        assert (st.st_mode & 0o777, st.st_uid) == (0o644, 0)
        assert json.loads(node_settings.read_text())["sha256"] == hashlib.sha256(cfg).hexdigest()
        stamp = json.loads(site.path(n, "/etc/slurmkit/installed.json").read_text())
        assert stamp["slurmkit_version"] == doc["bundle"]["slurmkit_version"]
        assert stamp["bundle"] == doc["bundle"]["id"]
        # slurmkit itself runs from the node's venv
        v = subprocess.run([str(site.path(n, "/opt/slurmkit/venv/bin/slurmkit")), "--version"],
                           capture_output=True, text=True, timeout=30)
        assert v.stdout.strip() == f"slurmkit, version {doc['bundle']['slurmkit_version']}"
        assert staged_leftovers(site.root(n)) == []
    before = snapshot(site.fleet.root)

    r, doc = site.install("--nodes", "n[1-4]", "--json")
    assert r.returncode == 0, r.stderr
    assert [(n["status"], n["changes"]) for n in doc["nodes"]] == [("unchanged", [])] * 4
    assert snapshot(site.fleet.root) == before             # not one file rewritten, not one added

    # a node edited by hand: --dry-run names exactly that file, and changes nothing
    edited = site.path("n2", "/etc/slurmkit/config.yaml")
    edited.write_text("# edited by hand\n")
    r, doc = site.install("--nodes", "n[1-4]", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    nodes = by_node(doc)
    assert nodes["n2"]["status"] == "would-change"
    assert [(c["action"], c["path"]) for c in nodes["n2"]["changes"]] == [("update", str(edited))]
    assert {nodes[n]["status"] for n in ("n1", "n3", "n4")} == {"unchanged"}
    assert edited.read_text() == "# edited by hand\n"
    r = site.install("--nodes", "n[1-4]", "--dry-run")[0]
    assert f"n2: would change\n  update       {edited}" in r.stdout

    r, doc = site.install("--nodes", "n2", "--json")
    assert by_node(doc)["n2"]["status"] == "changed"
    assert edited.read_bytes() == cfg
    assert Path(str(edited) + ".slurmkit-prev").read_text() == "# edited by hand\n"

    # the human report: a table per node and the slurm.conf lines the hooks need
    r, _ = site.install("--nodes", "n[1-4]")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0].split() == ["NODE", "STATUS", "CHANGES", "VERSION", "TIME", "DETAIL"]
    assert "PrologFlags=Alloc" in r.stdout
    # merged with the cluster's own parameters (dev/cluster.py sets sched_interval=2 & co.), pasteable as is
    sched = [ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith("SchedulerParameters=")]
    assert len(sched) == 1 and sched[0].endswith("nohold_on_prolog_fail"), r.stdout
    assert f"Prolog={site.root('n1')}/etc/slurm/slurmkit/prolog" in r.stdout


def test_a_changed_host_key_is_refused_and_reported_while_the_rest_install(site):
    site.fleet.rekey("n3")      # "reinstalled": same address, new key; known_hosts has the old one
    site.fleet.forget("n4")     # never seen
    with open(site.fleet.ssh_config, "a") as f:   # and one that is down: nothing listens on its port
        f.write(f"\nHost n9\n  HostName 127.0.0.1\n  Port {BASE_PORT + 25}\n  User root\n")
    r, doc = site.install("--nodes", "n[1-4,9]", "--json")
    assert r.returncode == 1
    nodes = by_node(doc)
    assert nodes["n1"]["status"] == nodes["n2"]["status"] == "changed"
    assert nodes["n3"]["status"] == "refused" and "host key CHANGED" in nodes["n3"]["error"]
    assert nodes["n4"]["status"] == "refused" and "--accept-new-host-keys" in nodes["n4"]["error"]
    assert nodes["n9"]["status"] == "failed" and "cannot connect" in nodes["n9"]["error"]
    assert not site.root("n3").exists() and not site.root("n4").exists()
    assert doc["summary"]["failed"] == 3

    # accepting new keys records n4's key and installs there; n3's CHANGED key stays refused
    r, doc = site.install("--nodes", "n[1-4]", "--accept-new-host-keys", "--json")
    assert r.returncode == 1
    nodes = by_node(doc)
    assert nodes["n4"]["status"] == "changed" and nodes["n3"]["status"] == "refused"
    assert site.fleet.known_line("n4") in site.fleet.known_hosts.read_text()
    assert "accepted new ssh-ed25519 host key" in r.stderr
    r, doc = site.install("--nodes", "n4", "--json")        # now known: no option needed
    assert r.returncode == 0 and by_node(doc)["n4"]["status"] == "unchanged"

    r = site.install("--nodes", "n[1-4]")[0]               # the table says which node and why
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("n3 "))
    assert "refused" in line and "CHANGED" in line
    assert "1 of 4 nodes failed" in r.stderr


def test_a_read_only_target_directory_fails_that_node_without_a_partial_file(site):
    assert site.install("--nodes", "n[1-4]", "--json")[0].returncode == 0
    hooks = site.path("n2", "/etc/slurm/slurmkit")
    before = snapshot(site.root("n2"), dirs=False)
    site.prolog.write_text(PROLOG_V2)
    site.write_config(extra="# v2 of the site config\n")    # config is staged first, then the prolog fails
    subprocess.run(["chattr", "+i", str(hooks)], check=True, timeout=10)
    try:
        r, doc = site.install("--nodes", "n[1-4]", "--json")
    finally:
        subprocess.run(["chattr", "-i", str(hooks)], check=True, timeout=10)
    assert r.returncode == 1
    nodes = by_node(doc)
    assert nodes["n2"]["status"] == "failed" and str(hooks) in nodes["n2"]["error"]
    assert {nodes[n]["status"] for n in ("n1", "n3", "n4")} == {"changed"}
    assert staged_leftovers(site.root("n2")) == []
    assert snapshot(site.root("n2"), dirs=False) == before   # n2 exactly as it was: old prolog, old config
    assert "v1" in site.path("n2", "/etc/slurm/slurmkit/prolog").read_text()
    assert "v2" in site.path("n1", "/etc/slurm/slurmkit/prolog").read_text()
    # writable again: the next run finishes the job
    r, doc = site.install("--nodes", "n[1-4]", "--json")
    assert r.returncode == 0 and by_node(doc)["n2"]["status"] == "changed"
    assert "v2" in site.path("n2", "/etc/slurm/slurmkit/prolog").read_text()


def test_rollback_restores_the_previous_version(site):
    r, doc = site.install("--nodes", "n[1-3]", "--rollback", "--json")
    assert r.returncode == 0 and {n["note"] for n in doc["nodes"]} == {
        "nothing to roll back: no previous install is recorded"}
    assert site.install("--nodes", "n[1-3]", "--json")[0].returncode == 0
    v1 = {n: site.path(n, "/etc/slurmkit/installed.json").read_bytes() for n in ("n1", "n2", "n3")}
    v1_cfg = site.config.read_bytes()
    site.prolog.write_text(PROLOG_V2)
    site.write_config(extra="# v2\n")
    assert site.install("--nodes", "n[1-3]", "--json")[0].returncode == 0
    assert "v2" in site.path("n1", "/etc/slurm/slurmkit/prolog").read_text()

    r, doc = site.install("--nodes", "n[1-3]", "--rollback", "--dry-run", "--json")
    assert {n["status"] for n in doc["nodes"]} == {"would-change"}
    assert "v2" in site.path("n1", "/etc/slurm/slurmkit/prolog").read_text()

    r, doc = site.install("--nodes", "n[1-3]", "--rollback", "--json")
    assert r.returncode == 0, r.stderr
    for n in ("n1", "n2", "n3"):
        node = by_node(doc)[n]
        assert node["status"] == "rolled-back"
        assert {c["path"] for c in node["changes"]} == {
            str(site.path(n, p)) for p in ("/etc/slurm/slurmkit/prolog", "/etc/slurmkit/config.yaml",
                                           "/etc/slurmkit/config.settings.json", "/etc/slurmkit/installed.json")}
        assert "v1" in site.path(n, "/etc/slurm/slurmkit/prolog").read_text()
        assert site.path(n, "/etc/slurmkit/config.yaml").read_bytes() == v1_cfg
        assert site.path(n, "/etc/slurmkit/installed.json").read_bytes() == v1[n]
        assert staged_leftovers(site.root(n)) == []
    # the rollback sticks: installing again (here: only the site config changed) is held on every node, dry run
    # included, until the admin moves forward on purpose
    site.write_config(extra="# v3: only the config changed\n")
    for dry in ([], ["--dry-run"]):
        r, doc = site.install("--nodes", "n[1-3]", "--json", *dry)
        assert r.returncode == 1 and {n["status"] for n in doc["nodes"]} == {"held"}, doc["nodes"]
        assert "rolled back to slurmkit" in doc["nodes"][0]["error"] and "--forward" in doc["nodes"][0]["error"]
        assert "--forward" not in doc["summary"]["retry"]
    assert "v1" in site.path("n3", "/etc/slurm/slurmkit/prolog").read_text()
    assert site.path("n3", "/etc/slurmkit/config.yaml").read_bytes() == v1_cfg
    r = site.install("--nodes", "n[1-3]")[0]
    assert "held" in next(ln for ln in r.stdout.splitlines() if ln.startswith("n1 ")), r.stdout
    r, doc = site.install("--nodes", "n[1-3]", "--forward", "--json")
    assert r.returncode == 0 and {n["status"] for n in doc["nodes"]} == {"changed"}, doc["nodes"]
    assert "v2" in site.path("n3", "/etc/slurm/slurmkit/prolog").read_text()
    assert not site.path("n3", "/etc/slurmkit/rolled-back.json").exists()
    r, doc = site.install("--nodes", "n[1-3]", "--json")          # forward again: installs as before
    assert r.returncode == 0 and {n["status"] for n in doc["nodes"]} == {"unchanged"}


def test_a_new_bundle_gets_a_new_venv_and_rollback_switches_back(site, tmp_path):
    import shutil
    import zipfile

    from slurmkit import config
    from slurmkit.install import bundle
    r, doc = site.install("--nodes", "n[1-2]", "--json")
    assert r.returncode == 0, r.stderr
    venv_a = f"venv-{doc['bundle']['id']}"
    payload_a = doc["bundle"]["prebuilt_venv"]["sha256"]
    # a second wheelhouse: the same wheels, click's re-zipped with a comment (valid, other bytes: a new bundle)
    wh = bundle.wheelhouse(config.loads(site.config.read_text()).install)
    other = tmp_path / "wheelhouse-b"
    shutil.copytree(wh.directory, other)
    (click,) = other.glob("click-*.whl")
    with zipfile.ZipFile(click, "a") as z:
        z.comment = b"rebuilt"
    site.write_config(wheelhouse=str(other))
    r, doc = site.install("--nodes", "n[1-2]", "--json")
    assert r.returncode == 0, r.stderr
    venv_b = f"venv-{doc['bundle']['id']}"
    assert venv_b != venv_a
    for n in ("n1", "n2"):
        changes = {(c["action"], c["path"]) for c in by_node(doc)[n]["changes"]}
        assert ("build-venv", str(site.path(n, f"/opt/slurmkit/{venv_b}"))) in changes
        assert os.readlink(site.path(n, "/opt/slurmkit/venv")) == venv_b
        assert os.readlink(site.path(n, "/opt/slurmkit/venv.slurmkit-prev")) == venv_a
        v = subprocess.run([str(site.path(n, "/opt/slurmkit/venv/bin/python")), "-c", "import click, slurmkit"],
                           capture_output=True, text=True, timeout=30)
        assert v.returncode == 0, v.stderr

    r, doc = site.install("--nodes", "n[1-2]", "--rollback", "--json")
    assert r.returncode == 0, r.stderr
    for n in ("n1", "n2"):
        assert by_node(doc)[n]["status"] == "rolled-back"
        assert os.readlink(site.path(n, "/opt/slurmkit/venv")) == venv_a
        assert json.loads(site.path(n, "/etc/slurmkit/installed.json").read_text())["venv"].endswith(venv_a)
        # the prebuilt venv's tarball is the first bundle's again (the second one kept as .slurmkit-prev)
        tarball = site.path(n, "/opt/slurmkit/wheels/slurmkit-venv.tar.gz")
        assert hashlib.sha256(tarball.read_bytes()).hexdigest() == payload_a
        assert hashlib.sha256(Path(str(tarball) + ".slurmkit-prev").read_bytes()).hexdigest() != payload_a


def test_without_the_prebuilt_venv_each_node_builds_its_own_from_the_wheels(site):
    site.write_config(prebuilt_venv=False)
    r, doc = site.install("--nodes", "n[1-2]", "--json")
    assert r.returncode == 0, r.stderr + r.stdout[-2000:]
    assert doc["bundle"]["prebuilt_venv"] is None
    for n in ("n1", "n2"):
        on_node = sorted(p.name for p in site.path(n, "/opt/slurmkit/wheels").iterdir())
        assert [w.split("-")[0] for w in on_node if w.startswith(("slurmkit-", "installer-"))] == \
            ["installer", "slurmkit"] and all(w.endswith(".whl") for w in on_node)
        build = [c for c in by_node(doc)[n]["changes"] if c["action"] == "build-venv"]
        assert len(build) == 1 and f"from {len(on_node) - 1} wheels" in build[0]["detail"]
        assert json.loads(site.path(n, "/etc/slurmkit/installed.json").read_text())["venv_from"] == "wheels"
        v = subprocess.run([str(site.path(n, "/opt/slurmkit/venv/bin/slurmkit")), "--version"],
                           capture_output=True, text=True, timeout=30)
        assert v.stdout.strip() == f"slurmkit, version {doc['bundle']['slurmkit_version']}", v.stderr
    # switched on again: the venv of this bundle is there (built from the wheels), so the tarball comes, the
    # site config (its prebuilt_venv line), the settings file made from it and the stamp change; nothing is rebuilt
    site.write_config()
    r, doc = site.install("--nodes", "n1", "--json")
    assert r.returncode == 0, r.stderr
    assert [(c["action"], Path(c["path"]).name) for c in doc["nodes"][0]["changes"]] == \
        [("create", "slurmkit-venv.tar.gz"), ("update", "config.yaml"), ("update", "config.settings.json"),
         ("update", "installed.json")]


def test_the_ssh_agent_is_used_when_no_key_file_is_named(site, tmp_path):
    # the ssh config without IdentityFile: the key is only in an agent we start (and stop, by pid)
    cfg = site.fleet.ssh_config
    cfg.write_text("\n".join(ln for ln in cfg.read_text().splitlines() if "IdentityFile" not in ln) + "\n")
    env_home = {"HOME": str(tmp_path / "home")}    # no ~/.ssh/id_* to fall back on
    (tmp_path / "home").mkdir()
    r, doc = site.install("--nodes", "n1", "--json", env=env_home)
    assert r.returncode == 1 and "No authentication methods available" in by_node(doc)["n1"]["error"]
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        subprocess.run(["ssh-add", "-q", str(site.fleet.client_key)], check=True, timeout=10,
                       env=dict(os.environ, SSH_AUTH_SOCK=str(sock)))
        r, doc = site.install("--nodes", "n1", "--json", env={**env_home, "SSH_AUTH_SOCK": str(sock)})
        assert r.returncode == 0, r.stdout + r.stderr
        assert by_node(doc)["n1"]["status"] == "changed"
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_paths_with_spaces_and_shell_characters_reach_the_node_as_one_argument(site, tmp_path):
    # spliced into a shell string, this would run `touch pwned` in the remote HOME (under tmp_path)
    root = tmp_path / "a root; touch pwned; true" / "{node}"
    site.write_config(root=str(root))
    r, doc = site.install("--nodes", "n1", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    node_root = Path(str(root).replace("{node}", "n1"))
    prolog = node_root / "etc" / "slurm" / "slurmkit" / "prolog"
    # the installed prolog's preamble is valid sh and names the venv under that root
    out = subprocess.run(["sh", "-c", prolog.read_text().replace("exit 0", 'echo "$SLURMKIT_PYTHON"')],
                         capture_output=True, text=True, timeout=10, env={})
    assert out.stdout.strip() == str(node_root / "opt" / "slurmkit" / "venv" / "bin" / "python")
    assert subprocess.run([out.stdout.strip(), "-c", "import slurmkit"], timeout=30).returncode == 0
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.compat("install")
def test_verify_runs_the_installed_slurmkit_check_on_each_node(site):
    r, doc = site.install("--nodes", "n[1-2]", "--verify", "--json")
    for n in doc["nodes"]:
        v = n["verify"]
        assert v["argv"] == [str(site.path(n["node"], "/opt/slurmkit/venv/bin/slurmkit")), "check", "--json",
                             "--node", n["node"]]
        assert v["returncode"] not in (126, 127)       # the installed slurmkit ran
        assert n["ok"] == v["ok"] == (v["returncode"] == 0)
    assert r.returncode == (0 if all(n["ok"] for n in doc["nodes"]) else 1)
    # the table says why a node failed its checks, not just an exit code (no GPU tools here: every check fails)
    r, _ = site.install("--nodes", "n1", "--verify")
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("n1 "))
    if r.returncode:
        assert "verify (exit 1): " in line and "nvidia-smi" in line, line


@pytest.mark.compat("install")
def test_the_dev_clusters_slurmd_runs_the_installed_prolog(site, clean):
    cluster = clean
    marks = site.tmp / "marks"
    marks.mkdir()
    site.prolog.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        # test prolog: leaves a marker saying which file ran and which slurmkit its venv has
        {{ echo "script=$0"; echo "node=$SLURMD_NODENAME"
          "$SLURMKIT_PYTHON" -c 'import sys, slurmkit; print("prefix=" + sys.prefix); print("version=" + slurmkit.__version__)'
        }} > {marks}/prolog-$SLURM_JOB_ID 2>&1
        exit 0
        """))
    r, doc = site.install("--nodes", "n[1-4]", "--json")
    assert r.returncode == 0, r.stderr
    # the cluster's real config (scontrol show config) runs the dev wrappers, not the installed hooks: warned;
    # the rest of the lines the hooks need are there
    missing = {m["line"].split("=")[0]: m["have"] for m in doc["slurm_conf"]["missing"]}
    # and the health program's lines, which a per-node root no longer leaves out silently (issue 31)
    assert missing == {"Prolog": str(cluster.dir / "hooks" / "prolog"),
                       "Epilog": str(cluster.dir / "hooks" / "epilog"),
                       "HealthCheckProgram": "(null)", "HealthCheckInterval": "0 sec", "HealthCheckNodeState": "ANY"}
    assert doc["slurm_conf"]["wrapper_needed"]
    # --from-slurm: the partition's nodes (n1..n4, which the ssh config maps to the sshds)
    r, doc = site.install("--from-slurm", "gpu", "--dry-run", "--json")
    assert r.returncode == 0 and [n["node"] for n in doc["nodes"]] == NODES
    assert {n["status"] for n in doc["nodes"]} == {"unchanged"}
    dev = [sys.executable, str(REPO / "dev" / "cluster.py"), "--dir", str(cluster.dir), "hooks"]
    subprocess.run([*dev, "--prolog", f"{site.fleet.root}/{{node}}/etc/slurm/slurmkit/prolog"], check=True,
                   timeout=30)
    try:
        job = cluster.sbatch("#!/bin/sh\ntrue\n", "-w", "n3", "-o", "/dev/null")
        cluster.wait_job(job)
    finally:
        subprocess.run(dev, check=True, timeout=30)    # the repo's hooks again
    mark = dict(ln.split("=", 1) for ln in (marks / f"prolog-{job}").read_text().splitlines() if "=" in ln)
    assert mark["script"] == str(site.path("n3", "/etc/slurm/slurmkit/prolog"))
    assert mark["node"] == "n3"
    assert mark["prefix"].startswith(str(site.path("n3", "/opt/slurmkit/venv")))
    assert mark["version"] == doc["bundle"]["slurmkit_version"]
