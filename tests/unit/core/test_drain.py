"""Drain and resume outcomes are typed (drain.Action): callers read .kind, .failed and .acted instead of parsing
the text, and the text the health log and audit print is what it always was."""

import json

from slurmkit.drain import Action, acted


def test_an_action_reads_as_its_text_and_carries_its_kind():
    a = Action("drain-failed", "scontrol: Unable to contact slurm controller")
    assert a == "drain-failed: scontrol: Unable to contact slurm controller"
    assert (a.kind, a.failed, a.acted) == ("drain-failed", True, False)
    assert json.dumps({"action": a}) == '{"action": "drain-failed: scontrol: Unable to contact slurm controller"}'
    ok = Action("drained")
    assert ok == "drained" and ok.acted and not ok.failed and acted(ok)


def test_what_counts_as_acted_on():
    for kind in ("drained", "already-drained", "would-drain", "skipped-admin-drain"):
        assert Action(kind).acted, kind
    for kind in ("skipped-down", "skipped-maintenance", "drain-failed", "skipped-unknown-node"):
        assert not Action(kind).acted, kind
    assert acted("drained") and not acted("drain-failed: x")  # plain text from an older record still reads
