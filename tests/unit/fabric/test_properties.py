"""Property tests of the fabric parser and tree (issue 33), as tests/unit/test_parser_properties.py does for the
other parsers: real ib/ captures and a synthetic fat tree (fabric_synth.py), damaged by hypothesis (cut short,
characters changed, lines lost or repeated, numbers blown up): a parse returns a Capture or raises ParseError
(a UsageError: exit 2, with the file), never another exception, never a hang; whatever parses builds a tree and
writes topology files without raising; and a capture cut inside a record is never read as a healthy fabric."""
import contextlib
import os
import signal
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from slurmkit.errors import UsageError
from slurmkit.fabric import conf, ibnet, tree

from fabric_synth import synth_ibnetdiscover  # noqa: E402
from nohang import no_hang as _no_hang  # noqa: E402

IB = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "ib"
HANG_SECONDS = 20
PROPS = hsettings(max_examples=int(os.environ.get("SLURMKIT_PROP_EXAMPLES", "60")), deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SYNTH = synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3"]}, ["spine1"],
                            rates={("leaf2", "spine1"): "4xDDR"})
TEXTS = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(IB.glob("*.txt"))] + [SYNTH]


def no_hang(seconds=HANG_SECONDS):
    return _no_hang(seconds)


@st.composite
def damaged(draw, texts=TEXTS):
    text = draw(st.sampled_from(texts))
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        op = draw(st.sampled_from(["cut", "char", "drop", "dup", "digits", "tabs"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "cut":
            lines = lines[:i] + [lines[i][: draw(st.integers(0, len(lines[i])))]]
        elif op == "char":
            ln = lines[i]
            j = draw(st.integers(0, max(0, len(ln) - 1)))
            lines[i] = ln[:j] + draw(st.characters(blacklist_categories=("Cs",))) + ln[j + 1:]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "digits":
            lines[i] = lines[i].replace("1", draw(st.sampled_from(["9" * 30, "٣", "-1", "0x", "<redacted>"])), 1)
        else:
            lines[i] = lines[i].replace("\t", " ").replace("  ", "\t")
    return "".join(lines)


def _parse(text):
    with no_hang():
        try:
            return ibnet.parse(text, "damaged.txt")
        except UsageError as e:
            assert e.path == "damaged.txt" and e.message
            return None


@PROPS
@given(damaged())
def test_damaged_captures_parse_or_raise_parse_error_and_what_parses_builds(text):
    cap = _parse(text)
    if cap is None:
        return
    with no_hang():
        fab = tree.build(cap, slurm_nodes={"n1", "n2"})
        conf.topology_conf(fab, "damaged.txt")
        conf.topology_yaml(fab, "damaged.txt")
        conf.to_json(fab)


@PROPS
@given(st.text(max_size=400))
def test_any_text_parses_or_raises_parse_error(text):
    _parse(text)


@PROPS
@given(st.integers(1, len(SYNTH) - 1))
def test_synthetic_capture_cut_anywhere_is_an_error_or_shows_a_finding(cut):
    """A cut capture (of a fabric with one DDR link) never reads as a healthy whole fabric: the parse fails
    (a cut line, a record without its Switch/Ca line) or what is left shows links from one end only or lost the
    CA records; it is never `ok` with every node placed."""
    cap = _parse(SYNTH[:cut])
    if cap is None:
        return
    fab = tree.build(cap)
    whole = tree.build(ibnet.parse(SYNTH))
    assert fab.findings or sorted(fab.hosts) != sorted(whole.hosts) or len(fab.links) < len(whole.links)
