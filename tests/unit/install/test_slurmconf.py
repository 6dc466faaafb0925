"""The slurm.conf advice is pasteable: merged list values, configless, a wrapper for per-node roots."""
import subprocess

from hypothesis import given
from hypothesis import strategies as st

from slurmkit.install import slurmconf as sc

LINES = sc.required_lines("/etc/slurm/slurmkit/prolog", "/etc/slurm/slurmkit/epilog", 300)


def by_key(lines):
    return {ln.key: ln.value for ln in lines}


def test_a_sites_scheduler_parameters_are_kept_and_ours_added():
    have = {"SchedulerParameters": "bf_continue,sched_interval=2", "PrologFlags": "Contain,X11",
            "PrologEpilogTimeout": "65534"}
    got = by_key(sc.merged(LINES, have))
    assert got["SchedulerParameters"] == "bf_continue,sched_interval=2,nohold_on_prolog_fail"
    assert got["PrologFlags"] == "Contain,X11,Alloc"
    assert got["PrologEpilogTimeout"] == "300"          # "no timeout" is replaced by ours
    # applied, the merged lines leave nothing missing, and merging again changes nothing
    applied = {**have, **got}
    assert sc.missing(LINES, applied) == []
    assert by_key(sc.merged(LINES, applied)) == got


def test_unset_values_and_a_sites_own_timeout():
    got = by_key(sc.merged(LINES, {"SchedulerParameters": "(null)", "PrologEpilogTimeout": "60"}))
    assert got["SchedulerParameters"] == "nohold_on_prolog_fail" and got["PrologFlags"] == "Alloc"
    assert got["PrologEpilogTimeout"] == "60"


@given(st.lists(st.from_regex(r"[a-z_]{1,12}(=[0-9]{1,3})?", fullmatch=True), max_size=6))
def test_merging_keeps_every_existing_parameter_in_order(params):
    have = {"SchedulerParameters": ",".join(params)}
    out = by_key(sc.merged(LINES, have))["SchedulerParameters"].split(",")
    assert out[:len(params)] == params
    assert "nohold_on_prolog_fail" in out and out.count("nohold_on_prolog_fail") <= max(1, params.count(
        "nohold_on_prolog_fail"))


def test_configless_is_read_from_slurmctld_parameters():
    assert sc.configless({"SlurmctldParameters": "enable_configless,idle_on_node_suspend"})
    assert not sc.configless({"SlurmctldParameters": "(null)"}) and not sc.configless(None)


def test_the_wrapper_runs_the_nodes_own_hook_with_its_arguments(tmp_path):
    root = tmp_path / "it's a root"
    for n in ("n1", "n2"):
        hook = root / n / "prolog"
        hook.parent.mkdir(parents=True)
        hook.write_text(f"#!/bin/sh\necho {n} \"$@\"\n")
        hook.chmod(0o755)
    w = tmp_path / "wrapper"
    w.write_text(sc.wrapper_script("prolog", f"{root}/{{node}}/prolog"))
    w.chmod(0o755)
    out = subprocess.run([str(w), "a b"], capture_output=True, text=True, timeout=10,
                         env={"SLURMD_NODENAME": "n2"})
    assert out.stdout == "n2 a b\n"


def slurmkit(tmp_path, config_text, *args):
    import os
    import sys
    cfg = tmp_path / "site.yaml"
    cfg.write_text(config_text)
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "SLURMKIT_CONFIG")}
    env["PATH"] = str(tmp_path)            # no scontrol: the cluster's config cannot be read
    return subprocess.run([sys.executable, "-c", "from slurmkit.cli import main; main()", "--config", str(cfg),
                           "install", *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_per_node_root_gets_a_wrapper_and_no_lines_until_slurm_conf_can_name_one_path(tmp_path):
    per_node = f"install:\n  root: {tmp_path}/nodes/{{node}}\n"
    r = slurmkit(tmp_path, per_node, "--hook-wrapper", "epilog")
    assert r.returncode == 0
    assert r.stdout.endswith(f"exec {tmp_path}/nodes/\"$SLURMD_NODENAME\"/etc/slurm/slurmkit/epilog \"$@\"\n")
    r = slurmkit(tmp_path, per_node, "--slurm-conf")
    assert r.returncode == 2 and "--hook-wrapper" in r.stderr and "install.slurm_prolog" in r.stderr
    # wrappers declared, but no scontrol: it says it cannot merge, rather than print lines that would drop the
    # site's own SchedulerParameters
    two = per_node + "  slurm_prolog: /etc/slurm/w-prolog\n  slurm_epilog: /etc/slurm/w-epilog\n"
    # the HealthCheckProgram needs one path for all nodes too: never silently left out
    r = slurmkit(tmp_path, two, "--slurm-conf")
    assert r.returncode == 2 and "--hook-wrapper prolog` (and epilog, health)" in r.stderr and "slurm_health" in r.stderr
    r = slurmkit(tmp_path, per_node, "--hook-wrapper", "health")
    assert r.returncode == 0
    assert r.stdout.endswith(f"exec {tmp_path}/nodes/\"$SLURMD_NODENAME\"/etc/slurm/slurmkit/health \"$@\"\n")
    for ok in (two + "  slurm_health: /etc/slurm/w-health\n", two + "  health_check_interval: 0\n"):
        r = slurmkit(tmp_path, ok, "--slurm-conf")
        assert r.returncode == 1 and "cannot read the cluster's config" in r.stderr and r.stdout == ""


def test_the_health_program_is_advised_with_its_interval_and_merged_like_the_rest():
    lines = sc.required_lines("/etc/slurm/slurmkit/prolog", "/etc/slurm/slurmkit/epilog", 300,
                              health="/etc/slurm/slurmkit/health", health_interval=120)
    assert [ln.text for ln in lines][-3:] == ["HealthCheckProgram=/etc/slurm/slurmkit/health",
                                              "HealthCheckInterval=120", "HealthCheckNodeState=ANY,CYCLE"]
    have = {"HealthCheckProgram": "/usr/sbin/nhc", "HealthCheckInterval": "300"}
    missing = dict((ln.key, h) for ln, h in sc.missing(lines, have))
    assert missing["HealthCheckProgram"] == "/usr/sbin/nhc"       # NHC in place: said, never silently replaced
    # as 22.05's `scontrol show config` prints them: `120 sec`, the flags in its own order
    assert [ln.key for ln, _ in sc.missing(lines, {
        "HealthCheckProgram": "/etc/slurm/slurmkit/health", "HealthCheckInterval": "120 sec",
        "HealthCheckNodeState": "CYCLE,ANY"}) if ln.key.startswith("HealthCheck")] == []
