"""`dev/fixtures.py grade`: every real capture with a verdict graded; a miss or a false drain exits 1."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("fixtures_tool", REPO / "dev" / "fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_real_fixtures_grade_clean(capsys):
    tool = load()
    assert tool.grade() == 0
    out = capsys.readouterr().out
    assert "faulty caught" in out and "healthy passed" in out
    assert "MISSED" not in out and "healthy FAILED" not in out
    # every new kernel-log class is on the table, with the GPU and what to do
    for needle in ("GPU 0000:09:00 could not be initialised", "GPU 0000:02:00 fell off the bus (also xid_aer)",
                   "GPU minor 0 could not be initialised", "could not boot its GSP firmware"):
        assert needle in out


def test_a_miss_and_a_false_drain_fail_the_grade(tmp_path, monkeypatch, capsys):
    tool = load()
    (tmp_path / "xid").mkdir()
    # SYNTHETIC rows and captures: a "faulty" log slurmkit reads as healthy, a "healthy" one with an Xid 79
    (tmp_path / "xid" / "synthetic-missed.txt").write_text("[    1.0] NVRM: loading NVIDIA UNIX Kernel Module\n")
    (tmp_path / "xid" / "synthetic-false-drain.txt").write_text(
        "[    2.0] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    (tmp_path / tool.PROV).write_text(tool.HEADER
                                      + "| xid/synthetic-missed.txt | test | n/a | faulty | |\n"
                                      + "| xid/synthetic-false-drain.txt | test | n/a | healthy | |\n")
    monkeypatch.setattr(tool, "DEST", tmp_path)
    assert tool.grade(quiet=True) == 1
    out = capsys.readouterr().out
    assert "faulty MISSED" in out and "healthy FAILED" in out and "fell off the bus" in out
