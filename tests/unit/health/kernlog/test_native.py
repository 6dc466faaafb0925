"""The native prefilter (kernlog.native: ahocorasick-rs over the log's bytes, then only the grader's windows parsed)
must find what the pure-Python path finds: the same events, in the same order, and the same verdict and reason,
on every real kernel-log capture and on generated logs whose failure lines fall anywhere (first and last line,
inside and at the edges of an AER burst's window, continuation lines around a hit); and the check runs the same
when the wheel does not import."""
from __future__ import annotations

import mmap
import random
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit import config
from slurmkit.health import kernlog
from slurmkit.health.checks import xid
from slurmkit.health.kernlog import anchors, events, native

from unit.health.kernlog.test_prefilter import LINES, PREFIX

XID = Path(__file__).resolve().parents[3] / "fixtures" / "xid"
HAVE = native.module() is not None
needs_wheel = pytest.mark.skipif(not HAVE, reason="ahocorasick-rs does not import here")


def seen(evs):
    """What a user can see of the events (all but the line numbers, which are the reduced text's on the native
    path), in order."""
    return [e.to_dict() | {"extra": e.extra, "mono": e.mono, "message": e.message} for e in evs]


def verdict(evs):
    s = config.Settings()
    r = xid.evaluate(evs, evs, s.xid, live=False)
    return r.status, r.code, r.reason, r.evidence


def same(raw: bytes, **kw):
    fast = kernlog.parse(raw, native=True, **kw)
    slow = kernlog.parse(raw, native=False, **kw)
    assert seen(fast) == seen(slow)
    assert verdict(fast) == verdict(slow)
    return fast


@needs_wheel
@pytest.mark.parametrize("path", sorted(p for p in XID.iterdir() if p.is_file()), ids=lambda p: p.name)
def test_every_real_capture_gives_the_same_events_and_verdict(path):
    same(path.read_bytes())


# SYNTHETIC message starts with no searched word on them, whose continuation line has one: only the window back
# to the start of the message finds them
MORE = [("NVRM: nvAssertFailed: 0000:3b:00 reported", "    NV_ERR_GPU_IS_LOST"),
        ("NVRM: osInitNvMapping: 0000:86:00", "\tRmInitAdapter failed! (0x22:0x56:894)"),
        ("pcieport 0000:00:02.0: AER: PCIe Bus Error:",
         "  severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)")]
FILLER = ["[{t:12.6f}] EXT4-fs (nvme0n1p2): mounted filesystem", "[{t:12.6f}] systemd[1]: Started Session 4.",
          "Jun  7 19:32:16 gpu01 kernel: usb 1-3: new high-speed USB device number 4 using xhci_hcd", ""]


@st.composite
def logs(draw):
    """SYNTHETIC: runs of ordinary lines (0-60: around burst_lines, so an AER burst's window edge falls anywhere)
    between the real line shapes of the fixtures, in every prefix form, CR or not, a last line with or without
    its newline."""
    out, t = [], 0.0
    for _ in range(draw(st.integers(0, 12))):
        for _ in range(draw(st.sampled_from([0, 0, 1, 2, 39, 40, 41, 60]))):
            t += 0.5
            out.append(draw(st.sampled_from(FILLER)).format(t=t))
        for _ in range(draw(st.integers(1, 4))):
            t += draw(st.floats(0, 3))
            for line in draw(st.sampled_from([(x,) for x in LINES] + MORE * 6)):
                pre = "" if line[:1] in (" ", "\t") else draw(PREFIX).format(t=t, s=int(t) % 60)
                out.append(pre + line + draw(st.sampled_from(["", "", "\r"])))
    return ("\n".join(out) + draw(st.sampled_from(["", "\n"]))).encode()


@needs_wheel
@settings(max_examples=300, deadline=None)
@given(logs(), st.sampled_from([1, 7, 64, 300, native.CHUNK]))
def test_generated_logs_give_the_same_events_and_verdict(raw, chunk):
    """Searched `chunk` bytes at a time too: a chunk boundary after any line."""
    was, native.CHUNK = native.CHUNK, chunk
    try:
        same(raw)
        same(raw, ignore_signatures=("aer",))
    finally:
        native.CHUNK = was


@needs_wheel
def test_an_aer_burst_names_the_gpu_below_the_port_across_the_window_edge():
    """SYNTHETIC: the GPU's device line 40 lines after the port's fatal line (burst_lines: in the burst) and 41
    (out of it), and the same burst 100 MB of lines away from anything else."""
    for gap, want in ((40, ("aer", "0000:02:00")), (41, ("aer_port", "0000:00:02"))):
        lines = [f"[{i / 100:12.6f}] systemd[1]: Started Session {i}." for i in range(200)]
        lines[100] = "[    1.000000] pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: id=0010"
        lines[100 + gap] = "[    1.100000] nvidia 0000:02:00.0: device has no AER-aware driver"
        ev = same(("\n".join(lines) + "\n").encode())
        assert [(e.sig, e.pci) for e in ev] == [want]


@needs_wheel
def test_an_aer_line_naming_a_device_seen_only_far_away_is_graded_on_the_whole_log():
    """SYNTHETIC: the port names the GPU, whose `nvidia <pci>:` line is thousands of lines up (no window holds
    it): the native path hands the log to the whole-log parse, and the GPU is named."""
    lines = ["[    0.500000] nvidia 0000:02:00.0: enabling device (0000 -> 0003)"]
    lines += [f"[{1 + i / 1e4:12.6f}] systemd[1]: Started Session {i}." for i in range(5000)]
    lines.append("[    9.000000] pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: 0000:02:00.0")
    raw = ("\n".join(lines) + "\n").encode()
    spans = native.windows(raw, events.pieces(events.signatures.active()), anchors.pieces(
        [events.signatures.data()["aer"]["fatal"]]), 40)
    assert spans[0][0] > 0                       # the device line is in no window
    ev = same(raw)
    assert [(e.sig, e.pci) for e in ev] == [("aer", "0000:02:00")]


@needs_wheel
def test_continuation_lines_above_and_below_the_hit_are_parsed_with_it():
    """SYNTHETIC (the shapes of the real captures): the searched word is on the third line of the message, each
    continuation line with its own syslog prefix, or indented (dmesg)."""
    sys_ = ["Jun  7 19:32:16 gpu01 kernel: NVRM: The NVIDIA GPU 0000:5d:00.0",
            "Jun  7 19:32:16 gpu01 kernel: NVRM: (PCI ID: 10de:2330) installed in this system has",
            "Jun  7 19:32:16 gpu01 kernel: NVRM: fallen off the bus and is not responding to commands."]
    dm = ["[ 5.000000] NVRM: The NVIDIA GPU 0000:5d:00.0", "               NVRM: (PCI ID: 10de:2330) installed in",
          "               NVRM: this system has fallen off the bus", "               NVRM: and is not responding."]
    lost = ["[ 5.000000] NVRM: nvAssertFailed: 0000:3b:00 reported", "    NV_ERR_GPU_IS_LOST"]
    for msg, want in ((sys_, ("offbus", "0000:5d:00")), (dm, ("offbus", "0000:5d:00")), (lost, ("gpu_lost",
                                                                                               "0000:3b:00"))):
        noise = [f"[{i:12.6f}] systemd[1]: ok" for i in range(100)]
        ev = same(("\n".join(noise + msg + noise) + "\n").encode())
        assert [(e.sig, e.pci, e.line) for e in ev] == [want + (msg[0],)]


def test_without_the_wheel_the_check_runs_the_pure_python_path(monkeypatch):
    """The hook must run when ahocorasick-rs has no wheel for the node: the module reads as missing, and a log
    over native.MIN_BYTES is graded the same."""
    raw = (XID / sorted(p.name for p in XID.iterdir() if p.is_file())[0]).read_bytes()
    want = seen(kernlog.parse(raw, native=False))
    monkeypatch.setattr(native, "_MOD", [None])
    assert seen(kernlog.parse(raw, native=True)) == want
    rnd = random.Random(3)
    big = b"".join(b"[%12.6f] systemd[1]: Started Session %d.\n" % (i / 1e3, rnd.randrange(9999))
                   for i in range(native.MIN_BYTES // 40))
    big += b"[ 9999.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off\n"
    assert [(e.code, e.pci) for e in kernlog.parse(big)] == [(79, "0000:3b:00")]


@needs_wheel
def test_an_mmap_of_a_big_log_is_searched_without_a_copy_and_graded_the_same(tmp_path):
    """SYNTHETIC 2 MiB log: the native path (over the mmap, over native.MIN_BYTES) and the pure-Python one agree."""
    rnd = random.Random(5)
    rows = [f"[{i / 1e3:12.6f}] " + rnd.choice(["systemd[1]: ok", "nvidia 0000:3b:00.0: enabling device",
                                                 "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"])
            for i in range(2 * native.MIN_BYTES // 40)]
    rows[len(rows) // 2] = "[ 55.5] NVRM: GPU 0000:86:00.0: RmInitAdapter failed! (0x22:0x56:894)"
    path = tmp_path / "synthetic-kern.log"
    path.write_text("\n".join(rows) + "\n")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        fast = kernlog.parse(mm)
        assert seen(fast) == seen(kernlog.parse(mm, native=False))
    assert [(e.sig, e.pci) for e in fast] == [("init_failed", "0000:86:00")]


def test_pieces_never_hold_a_space_and_cover_every_builtin_pattern():
    toks = events.pieces(events.signatures.active())
    assert toks and all(" " not in t and len(t) >= 3 for t in toks)
    assert "NVRM:" not in toks and "nvidia" not in toks            # on every driver line: no cut
    for sig in events.signatures.builtin():
        assert any(all(any(t in p for t in toks) for p in o) for o in anchors._options(
            anchors._p.parse(sig.regex.pattern), True)), sig.id
    assert anchors.pieces([r"(?i)nvrm: gpu is gone"]) is None and anchors.pieces([r"\d+ b\w*"]) is None
