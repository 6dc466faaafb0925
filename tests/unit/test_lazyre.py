"""Regexes compiled on first use (slurmkit/lazyre.py) and the kernel-log patterns' anchor table
(slurmkit/data/kernlog_anchors.json): a hook compiles only what a line reaches, and it still reads every line the
way the eager patterns did."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings, strategies as st

import slurmkit
from slurmkit import lazyre
from slurmkit.health import nvsmi
from slurmkit.health.kernlog import anchors, events

REPO = Path(__file__).resolve().parents[2]
XID = REPO / "tests" / "fixtures" / "xid"


def test_every_lazy_pattern_in_the_package_compiles():
    for m in pkgutil.walk_packages(slurmkit.__path__, "slurmkit."):
        if m.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(m.name)
        except ImportError:  # an optional dependency (pyslurm, NVML) this machine lacks
            continue
    from slurmkit.health.kernlog import signatures

    signatures.builtin()
    assert len(lazyre.ALL) > 20
    for p in lazyre.ALL:
        assert isinstance(p.compiled(), re.Pattern), p


PATTERNS = [r"NVRM: Xid \((?P<pci>[0-9a-f:.]+)\): (?P<code>\d+)", r"(?i)fatal\b", r"^\s*(\d+)\.(\d+)$", r"a|b+c"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet="NVRM: Xid()0123456789abcdef.\n FATALfatal+", max_size=80))
def test_a_lazy_pattern_answers_as_the_compiled_one(pattern, text):
    lazy, rx = lazyre.compile(pattern), re.compile(pattern)
    m1, m2 = lazy.search(text), rx.search(text)
    assert (m1 and m1.span(), m1 and m1.groups()) == (m2 and m2.span(), m2 and m2.groups())
    assert lazy.findall(text) == rx.findall(text) and lazy.sub("-", text) == rx.sub("-", text)
    assert lazy.pattern == pattern


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
