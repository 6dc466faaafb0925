"""The lean entry (slurmkit/entry.py): the command lines it runs without click give what the click CLI gives,
byte for byte (stdout, stderr, exit code); every other command line goes to click."""
import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings as hsettings, strategies as st

from slurmkit import entry

from clirun import run_cli

REPO = Path(__file__).resolve().parents[2]
SITE = str(REPO / "tests" / "golden" / "submit" / "site.yaml")
SPEC = str(REPO / "examples" / "finetune-1gpu.yaml")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURMKIT_CONFIG", SITE)


def run_entry(argv):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            entry.main(argv)
        except SystemExit as e:
            return e.code or 0, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv,want", [
    (["submit", "job.yaml"], ("submit", None, ["job.yaml"], {}, set())),
    (["--config", "c.yaml", "submit", "--set", "a=1", "--set=b=--x", "--json", "--", "-job.yaml"],
     ("submit", "c.yaml", ["-job.yaml"], {"--set": ["a=1", "b=--x"]}, {"--json"})),
    (["--config=c.yaml", "render", "job.yaml", "--set", "--dry-run"],
     ("render", "c.yaml", ["job.yaml"], {"--set": ["--dry-run"]}, set())),
    (["sync", "a", "--keep=2", "b", "--user", "u", "--json"],
     ("sync", None, ["a", "b"], {"--keep": ["2"], "--user": ["u"]}, {"--json"})),
    (["nodes", "--json", "n[1-2]"], ("nodes", None, ["n[1-2]"], {}, {"--json"})),
    (["nodes"], ("nodes", None, [], {}, set())),
    (["audit", "-p", "gpu", "--since=7d", "--csv"], ("audit", None, [], {"--partition": ["gpu"], "--since": ["7d"]},
                                                     {"--csv"})),
    (["submit", "-h"], None), (["-v", "submit", "j.yaml"], None), (["render", "--json", "j.yaml"], None),
    (["submit"], None), (["submit", "a.yaml", "b.yaml"], None), (["submit", "--set"], None),
    ([], None), (["--config"], None), (["submit", "--no-chek", "j.yaml"], None),
    (["sync", "a"], None), (["sync", "a", "b", "--keep", "0"], None), (["sync", "a", "b", "--keep", "x"], None),
    (["sync", "a", "b", "--keep", "1", "--keep", "2"], None), (["nodes", "a", "b"], None),
    (["audit", "resume", "n1"], None), (["audit", "-pgpu"], None), (["--config", "a", "--config", "b", "nodes"], None),
])
def test_parse_fast_takes_only_the_lines_it_knows(argv, want):
    assert entry.parse_fast(argv) == want


OPTS = [["--set", "nodes=2"], ["--set=env.A=it's"], ["--set", "nodes=x"], ["--set=gpus=1"], ["--dry-run"],
        ["--json"], ["--no-check"], ["--"], [SPEC], ["/nonexistent.yaml"], ["--set", "--json"]]
# a submit always carries --dry-run --no-check: nothing reaches a cluster
ARGV = st.builds(lambda pre, cmd, opts, spec_at: pre + [cmd] + [t for o in opts for t in o][:spec_at] + [SPEC]
                 + [t for o in opts for t in o][spec_at:] + (["--dry-run", "--no-check"] if cmd == "submit" else []),
                 st.sampled_from([[], ["--config", SITE], [f"--config={SITE}"], ["-v"]]),
                 st.sampled_from(["render", "submit"]), st.lists(st.sampled_from(OPTS), max_size=4),
                 st.integers(0, 6))


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(ARGV)
def test_what_the_fast_path_runs_is_what_click_prints(argv):
    fast = entry.parse_fast(argv)
    assume(fast is not None)
    assert run_entry(argv) == run_cli(argv)


@pytest.mark.parametrize("argv", [
    ["render", SPEC, "--set", "nodes=2"], ["submit", "--dry-run", "--no-check", SPEC],
    ["submit", "--dry-run", "--json", "--no-check", SPEC], ["render", SPEC, "--set", "time=xx"],
    ["render", "/nonexistent.yaml"], ["--config", "/nonexistent.yaml", "render", SPEC],
])
def test_fast_and_click_agree_on_outputs_and_errors(argv):
    assert entry.parse_fast(argv) is not None
    got = run_entry(argv)
    assert got == run_cli(argv)
    assert got[0] in (0, 2)


def test_other_command_lines_go_to_click():
    rc, out, err = run_entry(["submit", "--help"])
    assert rc == 0 and out.startswith("Usage: slurmkit submit [OPTIONS] JOB.yaml")
    rc, out, err = run_entry(["submit", "--no-chek", SPEC])
    assert rc == 2 and "Did you mean '--no-check'?" in err


# --- the submission cache: a resubmission skips the loaders, and never serves a script its files no longer make --

@pytest.fixture
def site(tmp_path):
    """A site config of our own, with a site template dir and a copy of the dev topology profile."""
    import shutil
    d = tmp_path / "site"
    (d / "templates").mkdir(parents=True)
    shutil.copy(REPO / "dev" / "topology" / "dev-2s8c-8gpu-synthetic.json", d / "profile.json")
    cfg = d / "site.yaml"
    cfg.write_text("submit:\n  template_dirs: [templates]\n  profiles: {gpu: profile.json}\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\npartition: gpu\ngpus_per_node: 8\ntasks_per_node: 2\nlauncher: srun\n"
                    "command: [python, t.py]\n")
    return cfg, spec


def entries(tmp_path):
    return sorted((tmp_path / "cache" / "slurmkit" / "submit").glob("*.json"))


def test_a_second_run_comes_from_the_cache_and_says_the_same(site, tmp_path):
    cfg, spec = site
    argv = ["--config", str(cfg), "render", str(spec)]
    first = run_entry(argv)
    assert first[0] == 0 and len(entries(tmp_path)) == 1
    assert run_entry(argv) == first == run_cli(argv)
    argv = ["--config", str(cfg), "submit", "--dry-run", "--no-check", str(spec), "--set", "nodes=2"]
    assert run_entry(argv) == run_entry(argv) == run_cli(argv)
    assert len(entries(tmp_path)) == 2                       # one per command line (the --set is part of it)


def test_a_changed_file_is_never_served_stale(site, tmp_path):
    import json
    import os
    cfg, spec = site
    argv = ["--config", str(cfg), "render", str(spec)]
    base = run_entry(argv)[1]
    spec.write_text(spec.read_text().replace("name: j", "name: k"))        # the spec
    assert "--job-name=k" in run_entry(argv)[1]
    cfg.write_text(cfg.read_text() + "  signal_lead: 300\n")               # the site config
    assert "USR2@300" in run_entry(argv)[1]
    # a template of the same name in an earlier directory of the search path shadows the built-in one
    (cfg.parent / "templates" / "torchrun.sbatch.j2").write_text("#!/bin/bash\n# site torchrun\n")
    spec.write_text(spec.read_text().replace("launcher: srun", "launcher: torchrun"))
    assert run_entry(argv)[1] == "#!/bin/bash\n# site torchrun\n"
    (cfg.parent / "templates" / "torchrun.sbatch.j2").write_text("#!/bin/bash\n# edit torchrun\n")  # same size
    os.utime(cfg.parent / "templates" / "torchrun.sbatch.j2", ns=(1, 1))
    assert run_entry(argv)[1] == "#!/bin/bash\n# edit torchrun\n"
    # the topology profile: fewer GPUs on the node now
    prof = json.loads((cfg.parent / "profile.json").read_text())
    prof["gpus"] = prof["gpus"][:4]
    (cfg.parent / "profile.json").write_text(json.dumps(prof))
    rc, out, err = run_entry(argv)
    assert rc == 2 and "8 GPUs per node, but the nodes of partition gpu have 4" in err
    assert (rc, out, err) == run_cli(argv)
    assert base.startswith("#!/bin/bash\n")


def test_no_cache_means_no_entry(site, tmp_path, monkeypatch):
    cfg, spec = site
    monkeypatch.setenv("SLURMKIT_NO_CACHE", "1")
    argv = ["--config", str(cfg), "render", str(spec)]
    assert run_entry(argv) == run_cli(argv) and entries(tmp_path) == []


def test_a_spec_that_is_not_a_regular_file_goes_the_full_way(tmp_path):
    import os
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    argv = ["render", str(fifo)]
    rc, out, err = run_entry(argv)
    assert rc == 2 and (rc, out, err) == run_cli(argv)


# --- sync and audit: the fast path prints what click prints (the timing figures aside), exits as it exits -------

def _same_but_time(a, b):
    import re
    t = re.compile(r'(\d+\.\d+s\)|"seconds": [0-9.]+)')
    return (a[0], t.sub("T", a[1]), t.sub("T", a[2])) == (b[0], t.sub("T", b[1]), t.sub("T", b[2]))


@pytest.fixture
def ckpts(tmp_path):
    from slurmkit.checkpoint import manifest as mf
    src = tmp_path / "src"
    for step in (1, 2):
        d = src / f"step-{step:010d}"
        (d / "sub").mkdir(parents=True)
        (d / "model.pt").write_bytes(b"m" * (1000 * step))
        (d / "sub" / "opt.pt").write_bytes(b"o" * 300)
        mf.write(str(d), mf.build(str(d), step))
    (src / "step-0000000003").mkdir()                       # incomplete: no manifest
    (src / "step-0000000003" / "x").write_text("partial")
    return tmp_path, src


SYNC_OPTS = [["--keep", "1"], ["--keep=2"], ["--keep", "0"], ["--dry-run"], ["--json"], ["--series", "77"],
             ["--marker", "DONE"], ["--user", "no-such-user-x"], ["--"], ["--keep", "x"]]


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(SYNC_OPTS), max_size=3), st.sampled_from(["dst", "src/inner", "s3://b/p", "nodir/x"]),
       st.sampled_from([[], ["--config", "/dev/null"], ["--config", "/nonexistent.yaml"]]))
def test_what_the_fast_path_syncs_is_what_click_prints(ckpts, opts, dest, pre):
    import shutil
    tmp, src = ckpts
    d = tmp / dest if "://" not in dest else dest
    flat = [t for o in opts for t in o]
    argv = pre + ["sync", *flat, str(src), str(d)]
    if entry.parse_fast(argv) is None:
        return
    got = run_entry(argv)
    for p in (tmp / "dst", tmp / "src" / "inner", tmp / "nodir"):
        shutil.rmtree(p, ignore_errors=True)
    want = run_cli(argv)
    for p in (tmp / "dst", tmp / "src" / "inner", tmp / "nodir"):
        shutil.rmtree(p, ignore_errors=True)
    assert _same_but_time(got, want), (argv, got, want)


def test_sync_fast_path_copies_then_skips_as_click_does(ckpts):
    tmp, src = ckpts
    argv = ["--config", "/dev/null", "sync", str(src), str(tmp / "dst"), "--keep", "1"]
    assert entry.parse_fast(argv) is not None
    rc, out, err = run_entry(argv)
    assert rc == 0 and out.startswith("copied 1 (") and "incomplete at source (not copied): step-0000000003" in out
    assert sorted(os.listdir(tmp / "dst")) == [".slurmkit-sync.lock", "step-0000000002"]
    assert run_entry(argv)[1] == run_cli(argv)[1] == ("copied 0 (0.0 MiB in 0.00s), unchanged 1, pruned 0, "
                                                       "incomplete at source (not copied): step-0000000003\n")


AUDIT = str(REPO / "tests" / "fixtures" / "local" / "dev-cluster-slurm22.05-scontrol-o-d-show-node-mixed-drain.txt")
AUDIT_OPTS = [["--json"], ["--csv"], ["-p", "gpu"], ["--partition=debug,gpu"], ["--since", "7d"], ["--since", "x"],
              ["--csv", "--json"], ["--from-file", "/nonexistent"]]


@hsettings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(AUDIT_OPTS), max_size=3))
def test_what_the_fast_path_audits_is_what_click_prints(opts):
    argv = ["audit", "--from-file", AUDIT, "--now", "2026-12-01T18:00:00", *[t for o in opts for t in o]]
    if entry.parse_fast(argv) is None:
        return
    assert run_entry(argv) == run_cli(argv)


@pytest.mark.parametrize("argv", [
    ["audit", "--from-file", AUDIT, "--now", "nope"], ["audit", "--from-file", "/nonexistent", "--json"],
    ["--config", "/nonexistent.yaml", "audit", "--from-file", AUDIT], ["audit", "--from-file", str(REPO)],
])
def test_audit_errors_read_the_same(argv):
    assert entry.parse_fast(argv) is not None
    got = run_entry(argv)
    assert got == run_cli(argv) and got[0] == 2
