"""The installer's pure parts: layout, hook preamble, sha256sum parsing, per-node plans, rollback targets and the
slurm.conf check (on a real `scontrol show config` from the dev cluster)."""
import hashlib
import json
import subprocess

import pytest

from slurmkit import config
from slurmkit.errors import UsageError
from slurmkit.install import slurmconf
from slurmkit.install.bundle import Wheelhouse, artifacts, hook_text
from slurmkit.install.layout import COMPLETE, PREV, layout
from slurmkit.install.plan import RemoteFile, parse_sha256sum, plan_node, plan_rollback

H = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731


def settings(text=""):
    return config.loads(text).install


@pytest.fixture
def wheelhouse(tmp_path):
    # synthetic wheel files: plan logic only looks at names and bytes
    for name, data in (("slurmkit-0.1.0-py3-none-any.whl", b"sk"), ("installer-1.1.0-py3-none-any.whl", b"in"),
                       ("pyyaml-6.0.4-cp311-cp311-x.whl", b"yaml")):
        (tmp_path / name).write_bytes(data)
    return Wheelhouse(tmp_path, tuple(sorted(tmp_path.glob("*.whl"))), "0.1.0")


def arts_for(lay, wh, prolog=b"#!/bin/sh\nexit 0\n", cfg=b"slurm:\n  timeout: 5\n"):
    return artifacts(lay, wh, prolog, b"#!/bin/sh\nexit 0\n", cfg)


def remote_from(arts, lay, wh, *, venv_built=True, link=True):
    """The state of a node that holds exactly these artifacts."""
    r = {a.path: RemoteFile(a.path, True, "file", a.sha256, a.mode, 0, 0) for a in arts}
    vdir = lay.venv_for(wh.bundle_id)
    if venv_built:
        r[f"{vdir}/{COMPLETE}"] = RemoteFile(f"{vdir}/{COMPLETE}", True, "file", H(b"x"), 0o644, 0, 0)
    if link:
        r[lay.venv] = RemoteFile(lay.venv, True, "link", link=vdir.rsplit("/", 1)[1])
    return r


def test_layout_defaults_and_root_with_node_name():
    lay = layout(settings(), "gpu001")
    assert (lay.prolog, lay.epilog, lay.config) == ("/etc/slurm/slurmkit/prolog", "/etc/slurm/slurmkit/epilog",
                                                    "/etc/slurmkit/config.yaml")
    assert lay.venv == "/opt/slurmkit/venv" and lay.python == "/opt/slurmkit/venv/bin/python"
    lay = layout(settings("install:\n  root: /tmp/t/{node}\n"), "gpu001")
    assert lay.prolog == "/tmp/t/gpu001/etc/slurm/slurmkit/prolog"
    assert lay.venv_for("abc") == "/tmp/t/gpu001/opt/slurmkit/venv-abc"


def test_config_rejects_relative_target_paths():
    with pytest.raises(UsageError, match=r"<config>:2: install: hooks_dir: expected an absolute path"):
        config.loads("install:\n  hooks_dir: etc/slurm\n")


def test_hook_preamble_names_venv_and_config_and_keeps_the_script():
    lay = layout(settings("install:\n  root: /r/{node}\n"), "n1")
    out = hook_text(b"#!/bin/sh\n# body\nexit 0\n", lay).decode()
    lines = out.splitlines()
    assert lines[0] == "#!/bin/sh" and lines[-2:] == ["# body", "exit 0"]
    assert ': "${SLURMKIT_PYTHON:=/r/n1/opt/slurmkit/venv/bin/python}" ' \
           '"${SLURMKIT_CONFIG:=/r/n1/etc/slurmkit/config.yaml}"' in out
    # the preamble is valid sh and an environment value set by a wrapper wins
    r = subprocess.run(["sh", "-c", out.replace("exit 0", 'echo "$SLURMKIT_PYTHON|$SLURMKIT_CONFIG"')],
                       env={"SLURMKIT_CONFIG": "/dev/cfg"}, capture_output=True, text=True, timeout=10)
    assert r.stdout.strip() == "/r/n1/opt/slurmkit/venv/bin/python|/dev/cfg"
    with pytest.raises(UsageError, match="#!"):
        hook_text(b"exit 0\n", lay)


def test_parse_sha256sum_plain_and_escaped_names():
    a, b = "a" * 64, "B" * 64
    text = f"{a}  /etc/x y\n\\{b}  /etc/we\\\\ird\\nname\nsha256sum: /nope: No such file or directory\n"
    assert parse_sha256sum(text) == {"/etc/x y": a, "/etc/we\\ird\nname": b.lower()}


def test_fresh_node_gets_everything_stamp_last(wheelhouse):
    lay = layout(settings(), "n1")
    arts = arts_for(lay, wheelhouse)
    plan = plan_node(lay, arts, {}, wheelhouse.bundle_id, "0.1.0")
    actions = [(c.action, c.path) for c in plan.changes]
    assert ("create", "/etc/slurm/slurmkit/prolog") in actions
    assert ("build-venv", f"/opt/slurmkit/venv-{wheelhouse.bundle_id}") in actions
    assert ("switch-venv", "/opt/slurmkit/venv") in actions
    assert plan.uploads[-1].role == "stamp" and actions[-1] == ("create", "/etc/slurmkit/installed.json")
    assert plan.build_venv == plan.switch_venv == lay.venv_for(wheelhouse.bundle_id)
    assert not plan.problems


def test_node_that_has_it_all_needs_nothing(wheelhouse):
    lay = layout(settings(), "n1")
    arts = arts_for(lay, wheelhouse)
    plan = plan_node(lay, arts, remote_from(arts, lay, wheelhouse), wheelhouse.bundle_id, "0.1.0")
    assert not plan.changed and not plan.uploads and plan.build_venv is None and plan.switch_venv is None


def test_drift_in_one_file_updates_that_file_and_the_stamp_only(wheelhouse):
    lay = layout(settings(), "n1")
    arts = arts_for(lay, wheelhouse)
    remote = remote_from(arts, lay, wheelhouse)
    remote[lay.config] = RemoteFile(lay.config, True, "file", H(b"edited by hand"), 0o644, 0, 0)
    plan = plan_node(lay, arts, remote, wheelhouse.bundle_id, "0.1.0")
    assert [(c.action, c.path) for c in plan.changes] == [("update", lay.config)]
    assert [a.role for a in plan.uploads] == ["config", "stamp"]


def test_wrong_mode_or_owner_is_fixed_even_with_the_right_content(wheelhouse):
    lay = layout(settings(), "n1")
    arts = arts_for(lay, wheelhouse)
    remote = remote_from(arts, lay, wheelhouse)
    p = next(a for a in arts if a.role == "prolog")
    remote[p.path] = RemoteFile(p.path, True, "file", p.sha256, 0o777, 1000, 1000)
    plan = plan_node(lay, arts, remote, wheelhouse.bundle_id, "0.1.0")
    (ch,) = [c for c in plan.changes if c.path == p.path]
    assert ch.action == "fix-mode" and "mode 777 -> 755" in ch.detail and "owner 1000:1000 -> 0:0" in ch.detail


def test_a_real_directory_at_the_venv_path_is_a_problem_not_overwritten(wheelhouse):
    lay = layout(settings(), "n1")
    arts = arts_for(lay, wheelhouse)
    remote = remote_from(arts, lay, wheelhouse)
    remote[lay.venv] = RemoteFile(lay.venv, True, "dir")
    plan = plan_node(lay, arts, remote, wheelhouse.bundle_id, "0.1.0")
    assert plan.problems and "not a link slurmkit manages" in plan.problems[0]


def _stamp(lay, wh, prolog):
    arts = arts_for(lay, wh, prolog=prolog)
    return json.loads(arts[-1].data), arts


def test_rollback_goes_to_the_previous_stamp_using_prev_copies(wheelhouse):
    lay = layout(settings(), "n1")
    old, old_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n# v1\n")
    new, new_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n# v2\n")
    remote = remote_from(new_arts, lay, wheelhouse)
    p_old = next(a for a in old_arts if a.role == "prolog")
    remote[p_old.path + PREV] = RemoteFile(p_old.path + PREV, True, "file", p_old.sha256, 0o755, 0, 0)
    rb = plan_rollback(lay, new, old, remote)
    assert rb.target == old and rb.swap_stamp and rb.swaps == [lay.prolog] and not rb.problems
    assert [c.action for c in rb.changes] == ["restore", "restore"]


def test_rollback_after_a_half_done_install_restores_the_stamp_it_has(wheelhouse):
    lay = layout(settings(), "n1")
    cur, cur_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n# v1\n")
    _, half_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n# v2\n")
    remote = remote_from(cur_arts, lay, wheelhouse)
    p_half = next(a for a in half_arts if a.role == "prolog")
    p_cur = next(a for a in cur_arts if a.role == "prolog")
    remote[lay.prolog] = RemoteFile(lay.prolog, True, "file", p_half.sha256, 0o755, 0, 0)
    remote[lay.prolog + PREV] = RemoteFile(lay.prolog + PREV, True, "file", p_cur.sha256, 0o755, 0, 0)
    rb = plan_rollback(lay, cur, None, remote)
    assert rb.target == cur and not rb.swap_stamp and rb.swaps == [lay.prolog] and "half way" in rb.note


def test_rollback_reports_what_it_cannot_restore(wheelhouse):
    lay = layout(settings(), "n1")
    old, _ = _stamp(lay, wheelhouse, b"#!/bin/sh\n# v1\n")
    new, new_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n# v2\n")
    rb = plan_rollback(lay, new, old, remote_from(new_arts, lay, wheelhouse))
    assert rb.problems == [f"{lay.prolog}: the version to restore ({json.loads(json.dumps(old))['files'][lay.prolog][:12]}) "
                           "is not kept on the node"]
    assert plan_rollback(lay, new, None, remote_from(new_arts, lay, wheelhouse)).target is None


def test_rollback_switches_the_venv_back_when_the_old_one_is_there(wheelhouse):
    lay = layout(settings(), "n1")
    old, old_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n")
    old["venv"] = lay.venv_for("000000000000")
    new, new_arts = _stamp(lay, wheelhouse, b"#!/bin/sh\n")
    remote = remote_from(new_arts, lay, wheelhouse)
    rb = plan_rollback(lay, new, old, remote)
    assert rb.problems == [f"{old['venv']}: the venv to restore is gone"]
    remote[f"{old['venv']}/{COMPLETE}"] = RemoteFile("x", True, "file", H(b"x"))
    rb = plan_rollback(lay, new, old, remote)
    assert rb.venv == old["venv"] and not rb.problems


def test_slurm_conf_check_quiet_on_the_dev_clusters_real_config(fixture_text):
    conf = slurmconf.parse_show_config(fixture_text("local/dev-cluster-slurm22.05-scontrol-show-config.txt"))
    assert conf["Prolog"] == "/tmp/sk-e-dev/hooks/prolog" and conf["PrologFlags"] == "Alloc"
    lines = slurmconf.required_lines("/tmp/sk-e-dev/hooks/prolog", "/tmp/sk-e-dev/hooks/epilog", 60)
    assert slurmconf.missing(lines, conf) == []


@pytest.mark.parametrize("version,d", [("24.11", "/tmp/sk-v12i-c24"), ("26.05", "/tmp/sk-v12i-c26")])
def test_slurm_conf_check_reads_the_indexed_hooks_of_newer_slurm(fixture_text, version, d):
    # real captures: 24.11+ prints `Prolog[0] = ...` (several scripts may be configured)
    conf = slurmconf.parse_show_config(fixture_text(f"local/dev-cluster-slurm{version}-scontrol-show-config.txt"))
    assert conf["Prolog[0]"] == conf["Prolog"] == f"{d}/hooks/prolog"
    lines = slurmconf.required_lines(f"{d}/hooks/prolog", f"{d}/hooks/epilog", 60)
    assert slurmconf.missing(lines, conf) == []
    # the installed hooks are not among the cluster's scripts: reported with every script it has
    lines = slurmconf.required_lines("/etc/slurm/slurmkit/prolog", f"{d}/hooks/epilog", 60)
    assert [(ln.key, have) for ln, have in slurmconf.missing(lines, conf)] == [("Prolog", f"{d}/hooks/prolog")]


def test_slurm_conf_check_finds_the_hook_among_several_scripts():
    # synthetic: two Prolog scripts, as 24.11+ prints them, the required one second
    conf = slurmconf.parse_show_config("Prolog[0]               = /etc/slurm/site-prolog\n"
                                       "Prolog[1]               = /etc/slurm/slurmkit/prolog\n")
    lines = slurmconf.required_lines("/etc/slurm/slurmkit/prolog", "/e", 60)[:1]
    assert slurmconf.missing(lines, conf) == []
    lines = slurmconf.required_lines("/other/prolog", "/e", 60)[:1]
    assert [have for _, have in slurmconf.missing(lines, conf)] == \
        ["/etc/slurm/site-prolog, /etc/slurm/slurmkit/prolog"]


def test_slurm_conf_check_fires_on_each_missing_line(fixture_text):
    text = fixture_text("local/dev-cluster-slurm22.05-scontrol-show-config.txt")
    # synthetic: the real capture with the hook settings taken out or changed, as on a cluster without them
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(("PrologFlags", "PrologEpilogTimeout")))
    text = text.replace(",nohold_on_prolog_fail", "")
    conf = slurmconf.parse_show_config(text)
    lines = slurmconf.required_lines("/etc/slurm/slurmkit/prolog", "/tmp/sk-e-dev/hooks/epilog", 300)
    got = {ln.key: have for ln, have in slurmconf.missing(lines, conf)}
    assert got == {"Prolog": "/tmp/sk-e-dev/hooks/prolog", "PrologFlags": "(not set)",
                   "PrologEpilogTimeout": "(not set)",
                   "SchedulerParameters": "sched_min_interval=0,batch_sched_delay=0,sched_interval=2"}


def test_a_target_directory_others_can_write_stops_the_node(wheelhouse):
    lay = layout(settings(), "n1")
    arts = arts_for(lay, wheelhouse)
    remote = remote_from(arts, lay, wheelhouse)
    remote["/etc/slurm/slurmkit"] = RemoteFile("/etc/slurm/slurmkit", True, "dir", None, 0o1777, 0, 0)
    remote["/etc/slurmkit"] = RemoteFile("/etc/slurmkit", True, "dir", None, 0o755, 0, 0)
    plan = plan_node(lay, arts, remote, wheelhouse.bundle_id, "0.1.0")
    assert plan.problems == ["/etc/slurm/slurmkit is writable by others (mode 1777, owner 0): anyone could "
                             "replace what runs as root; fix it first"]
    remote["/etc/slurm/slurmkit"] = RemoteFile("/etc/slurm/slurmkit", True, "dir", None, 0o755, 1000, 1000)
    assert "not owned by root" in plan_node(lay, arts, remote, wheelhouse.bundle_id, "0.1.0").problems[0]
    remote["/etc/slurm/slurmkit"] = RemoteFile("/etc/slurm/slurmkit", True, "dir", None, 0o755, 0, 0)
    assert plan_node(lay, arts, remote, wheelhouse.bundle_id, "0.1.0").problems == []
