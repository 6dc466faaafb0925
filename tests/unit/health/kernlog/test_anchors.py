"""The kernel-log patterns' anchor table (slurmkit/data/kernlog_anchors.json): a hook looks the patterns' literal
anchors up instead of parsing each regex, and still reads every line the way the patterns alone would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slurmkit.health import nvsmi
from slurmkit.health.kernlog import anchors, events

REPO = Path(__file__).resolve().parents[4]
XID = REPO / "tests" / "fixtures" / "xid"


def test_the_anchor_table_is_current():
    r = subprocess.run([sys.executable, str(REPO / "dev" / "gen_anchors.py"), "--check"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for rx in events.builtin_patterns():
        assert anchors.options(rx) == anchors.computed(rx), rx


def test_the_table_changes_no_event_on_any_capture(monkeypatch):
    """The table only saves the regex parsing: every real capture gives the same events with it and without."""
    with_table = {p.name: events.parse(p.read_text(errors="replace")) for p in sorted(XID.glob("*.txt"))}
    assert any(with_table.values())
    monkeypatch.setattr(anchors, "_TABLE", {})
    monkeypatch.setattr(anchors, "_NEEDLES", {})
    monkeypatch.setattr(events, "_KEYWORDS", {})
    for name, evs in with_table.items():
        assert [e.to_dict() for e in events.parse((XID / name).read_text(errors="replace"))] == \
            [e.to_dict() for e in evs], name


def test_each_nvidia_smi_error_pattern_holds_its_literal():
    """nvsmi.errors skips healthy output by its literals: each must be in every match of its pattern."""
    for lit, rx in nvsmi._ERRORS:
        required = [next(iter(o)) for o in anchors.computed(rx.pattern) if len(o) == 1]
        assert any(lit in r for r in required), (lit, rx.pattern, required)


def test_every_built_in_signature_compiles():
    """The built-in signatures are compiled where a line reaches them (the re module's cache), not when a hook
    loads them: each must compile, and its anchors be in the table."""
    import re

    from slurmkit.health.kernlog import signatures

    for s in signatures.builtin():
        assert isinstance(re.compile(s.pattern), re.Pattern), s.id
        assert anchors.needles(s.pattern) is not None, s.id
