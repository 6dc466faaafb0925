"""Issue 28 item 6: a fault after a long line is still found. kern.log after a crash holds a run of NULs glued to the
next boot's first line; a log written with CR line ends is one "line" of megabytes to a newline-only reader; and a
line over logline.MAX_LINE was cut there and the rest never read. Each is read on past the cut: lines end at a
newline, a CR (CRLF is one end) or NULs, and a line over MAX_LINE comes in pieces.

The failing lines are the real Xid 79 capture (tests/fixtures/xid/h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt);
the NULs, CR line ends and garbage around them are SYNTHETIC (built here)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.health import kernlog
from slurmkit.health.kernlog import logline, native
from slurmkit.health.runner import run_checks

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "xid" / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt"
REAL = FIX.read_text()
X79 = next(ln for ln in REAL.splitlines() if "Xid (PCI:0000:5d:00): 79" in ln) + "\n"
BENIGN = "[ {i}.000000] usb 1-{i}: new high-speed USB device number {i} using xhci_hcd"

# SYNTHETIC: what a crash leaves in kern.log (a hole of NULs), CR line ends, and a long line of other text
CASES = {
    "nul-hole": "\0" * 8192 + X79,
    "nul-hole-after-a-line": BENIGN.format(i=1) + "\n" + "\0" * 8192 + X79 + "\0" * 300,
    "1000-cr-lines": "".join(BENIGN.format(i=i) + "\r" for i in range(1000)) + X79,
    "1000-crlf-lines": "".join(BENIGN.format(i=i) + "\r\n" for i in range(1000)) + X79,
    "9-kib-line-glued": "x" * 9000 + " " + X79.split("] ", 1)[1],
    "40-kib-line-glued": ("garbage " * 5000) + X79.split("] ", 1)[1],
    "whole-capture-after-a-nul-hole": "\0" * 8192 + REAL,
    "whole-capture-cr": REAL.replace("\n", "\r"),
}


def judge(text):
    (r,) = run_checks(config.Settings(), "full", captures={"xid": text}).results
    return r


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fault_after_a_long_line_fails_the_check(case):
    r = judge(CASES[case])
    assert (r.status, r.code) == ("fail", "xid79"), r.reason
    assert "0000:5d:00 fell off the bus" in r.reason


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("raw", [False, True], ids=["str", "bytes"])
def test_every_path_finds_the_same_events(case, raw):
    """The prefiltered parse, the every-line parse (a site's unanchored signature) and the native prefilter (a big
    log file's bytes) see the same events."""
    text = CASES[case].encode() if raw else CASES[case]
    fast = kernlog.parse(text)
    assert [e.code for e in fast if e.kind == "xid"] == [79]
    every = kernlog.parse(text, prefilter=False)
    assert [e.to_dict() for e in every] == [e.to_dict() for e in fast]
    assert [e.lineno for e in every] == [e.lineno for e in fast]
    if raw and native.module() is not None:
        assert [e.to_dict() for e in kernlog.parse(text, native=True)] == [e.to_dict() for e in fast]


def test_line_numbers_count_cr_line_ends_and_not_nul_runs():
    assert [e.lineno for e in kernlog.parse(CASES["1000-cr-lines"])] == [1001]
    assert [e.lineno for e in kernlog.parse(CASES["1000-crlf-lines"])] == [1001]
    assert [e.lineno for e in kernlog.parse(CASES["nul-hole-after-a-line"])] == [2]
    # the Xid line keeps its own timestamp when NULs or CRs end the line before it
    for case in ("nul-hole", "1000-cr-lines"):
        (e,) = kernlog.parse(CASES[case])
        assert e.time == "4254.197860"


def test_a_line_over_the_limit_is_read_in_pieces_each_cut_before_a_driver_message():
    line = "y" * (logline.MAX_LINE - 10) + " NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has"
    pieces = [p for _, p in logline.candidate_lines(line + " fallen off the bus.\n", ("NVRM",))]
    assert len(pieces) == 2 and pieces[1].startswith("NVRM: Xid") and pieces[1].endswith("fallen off the bus.")
    assert all(len(p) <= logline.MAX_LINE for p in pieces)


def test_a_log_file_with_a_nul_hole_is_read_past_it(tmp_path):
    """The live check on xid.log_file (kern.log read raw from the mark): the crash's hole of NULs, then the next
    boot's Xid 79."""
    s = config.Settings()
    s.paths.state_dir = str(tmp_path / "state")
    log = tmp_path / "kern.log"
    s.xid.log_file = str(log)
    log.write_bytes(b"\0" * 8192 + X79.encode())
    (r,) = run_checks(s, "prolog", only=["xid"], node="n9").results
    assert (r.status, r.code) == ("fail", "xid79"), r.reason
    assert json.loads(json.dumps(r.evidence))["line"] == X79.rstrip("\n")
