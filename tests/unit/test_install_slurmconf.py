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
