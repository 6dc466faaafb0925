"""The kernel-log prefilter (C string searches for the literal anchors of every pattern in use) must never change
what the parser finds: the prefiltered parse equals the parse of every line, on generated logs and on every real
kernel-log capture in tests/fixtures/xid; a site's signature is found even when it shares no word with the built-in
ones, and one with no literal anchor turns the prefilter off."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.health import kernlog
from slurmkit.health.kernlog import anchors, events

XID = Path(__file__).resolve().parents[3] / "fixtures" / "xid"


def same(text, **kw):
    a = [e.to_dict() | {"lineno": e.lineno, "extra": e.extra, "mono": e.mono}
         for e in kernlog.parse(text, **kw)]
    b = [e.to_dict() | {"lineno": e.lineno, "extra": e.extra, "mono": e.mono}
         for e in kernlog.parse(text, prefilter=False, **kw)]
    assert a == b
    return a


@pytest.mark.parametrize("path", sorted(p for p in XID.iterdir() if p.is_file()), ids=lambda p: p.name)
def test_every_real_capture_parses_the_same_with_and_without_the_prefilter(path):
    raw = path.read_bytes()
    same(raw)
    same(raw.decode("utf-8", "replace"))


# SYNTHETIC pieces: the real line shapes of the fixtures (driver messages, AER bursts, continuation lines, userspace
# lines), mixed with ordinary kernel noise, in the prefix forms the parser reads
LINES = [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: The NVIDIA GPU 0000:5d:00.0", "    NVRM: (PCI ID: 10de:2330) installed in this system has",
    "    NVRM: fallen off the bus and is not responding to commands.", "   and is not responding to commands.",
    "NVRM: GPU 0000:86:00.0: RmInitAdapter failed! (0x22:0x56:894)",
    "pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: 0000:02:00.0",
    "pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0",
    "nvidia 0000:02:00.0: device has no AER-aware driver", "nvidia 0000:02:00.0: enabling device (0000 -> 0003)",
    "pcieport 0000:00:01.0: pciehp: Slot(1): Link Down, Surprise Down",
    "NVRM: GPU0 rpcSendMessage: rpcSendMessage failed with status 0x0000000f for fn 76!",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 3 LTSSM Fault Up", "SXid (PCI:garbled",
    "NVRM: GPU at PCI:0000:3b:00: GPU-1234", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
    "EXT4-fs (nvme0n1p2): mounted filesystem", "systemd[1]: Started Session 4 of User slurm.",
    "\tcontinuation of something", "", "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 "
    "(None) to 0x1 (GPU Reset Required)", "NVRM: Xid (PCI:0000",
]
PREFIX = st.sampled_from(["[{t:12.6f}] ", "[  +0.000844] ", "Jun  7 19:32:{s:02d} gpu01 kernel: ",
                          "2024-04-05T21:29:{s:02d},123+00:00 gpu01 kernel: ", "Jun  7 19:32:{s:02d} gpu01 root: ",
                          "kern  :err   : [{t:12.6f}] ", ""])


@st.composite
def logs(draw):
    out, t = [], 0.0
    for _ in range(draw(st.integers(0, 40))):
        t += draw(st.floats(0, 3))
        line = draw(st.sampled_from(LINES))
        pre = "" if line[:1] in (" ", "\t") else draw(PREFIX).format(t=t, s=int(t) % 60)
        out.append(pre + line + draw(st.sampled_from(["", "", "\r"])))
    return "\n".join(out) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=300, deadline=None)
@given(logs())
def test_generated_logs_parse_the_same_with_and_without_the_prefilter(text):
    same(text)
    same(text.encode())
    same(text, ignore_signatures=("aer",))


def test_a_site_signature_with_its_own_words_is_searched_for():
    site = {"id": "fabric", "code": "xid_fabric", "match": r"fabricmanager: GPU (?P<inst>GPU\d+) unreachable"}
    kw = events.keywords(events.signatures.active([site]))
    assert kw is not None and any(k in "fabricmanager: GPU " for k in kw)
    text = "[ 1.0] systemd[1]: ok\n[ 2.0] fabricmanager: GPU GPU3 unreachable\n"
    ev = same(text, extra_signatures=[site])
    assert [(e["signature"], e["pci"]) for e in ev] == [("fabric", "GPU3")]


@pytest.mark.parametrize("rx", [r"\d+ b\w* \w+", r"(?i)nvrm: gpu is gone", r"ab|\d\d"])
def test_a_signature_with_no_literal_anchor_turns_the_prefilter_off(rx):
    assert anchors.keywords([rx]) is None
    site = {"id": "loose", "code": "xid_loose", "match": rx}
    assert events.keywords(events.signatures.active([site])) is None
    text = "[ 1.0] 12 bad things\n[ 2.0] NVRM: GPU is gone\n[ 3.0] ab\n"
    assert same(text, extra_signatures=[site])       # found, though no built-in word is on the line


def test_builtin_anchors_cover_every_builtin_pattern():
    kw = events.builtin_keywords()
    assert kw is not None and "NVRM:" in kw and "nvidia" in kw
    for sig in events.signatures.builtin():
        assert any(all(any(k in lit for k in kw) for lit in o) for o in anchors.options(sig.regex)), sig.id
