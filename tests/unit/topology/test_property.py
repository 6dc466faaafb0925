"""Property tests on SYNTHETIC matrices rendered the way nvidia-smi prints them: the parser returns exactly what
was rendered, with tabs or with tabs expanded to spaces; and a capture that lost one tab is refused or parses to
the same result, never to a different one."""
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.errors import UsageError
from slurmkit.topology import format_cpulist, parse_topo

PCIE = ["PIX", "PXB", "PHB", "NODE", "SYS"]


@st.composite
def topologies(draw):
    n_gpu = draw(st.integers(2, 8))
    n_nic = draw(st.integers(0, 4))
    cols = [f"GPU{i}" for i in range(n_gpu)] + [f"NIC{i}" for i in range(n_nic)]
    tok = {}
    for a in range(len(cols)):
        for b in range(a + 1, len(cols)):
            both_gpu = a < n_gpu and b < n_gpu
            t = draw(st.sampled_from(PCIE + (["NV4", "NV12", "NV18"] if both_gpu else [])))
            tok[(a, b)] = tok[(b, a)] = t
    cpu_empty = draw(st.booleans())
    gpus = []
    for g in range(n_gpu):
        if cpu_empty and g < n_gpu // 2:
            cpus = []
        else:
            lo = draw(st.integers(0, 200))
            cpus = sorted(set(range(lo, lo + draw(st.integers(1, 48)))) |
                          set(range(lo + 256, lo + 256 + draw(st.integers(0, 48)))))
        numa = draw(st.sampled_from([[], [0], [1], [3]]))
        gpus.append((cpus, numa))
    return cols, n_gpu, tok, gpus


def render(cols, n_gpu, tok, gpus):
    out = ["\t" + "\t".join(cols) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a, name in enumerate(cols):
        cells = [" X " if a == b else tok[(a, b)] for b in range(len(cols))]
        row = [name] + cells
        if a < n_gpu:
            cpus, numa = gpus[a]
            row += [format_cpulist(cpus), format_cpulist(numa) or "N/A", "", "N/A"]
        out.append("\t".join(row))
    nics = [c for c in cols if c.startswith("NIC")]
    out += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks"]
    if nics:
        out += ["", "NIC Legend:", ""] + [f"  {c}: mlx5_{i}" for i, c in enumerate(nics)]
    return "\n".join(out) + "\n"


def check(profile, cols, n_gpu, tok, gpus):
    assert [g["cpus"] for g in profile["gpus"]] == [c for c, _ in gpus]
    assert [g["numa"] for g in profile["gpus"]] == [n for _, n in gpus]
    for a in range(n_gpu):
        assert profile["gpus"][a]["links"] == {cols[b]: tok[(a, b)] for b in range(len(cols)) if b != a}
    assert [n["device"] for n in profile["nics"]] == [f"mlx5_{i}" for i in range(len(cols) - n_gpu)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies())
def test_round_trip_tabs_and_spaces(t):
    text = render(*t)
    check(parse_topo(text).to_profile(), *t)
    check(parse_topo("".join(ln.expandtabs(8) + "\n" for ln in text.splitlines())).to_profile(), *t)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), st.integers(0, 10 ** 6))
def test_one_lost_tab_is_refused_or_harmless(t, seed):
    text = render(*t)
    ref = parse_topo(text).to_profile()
    tabs = [i for i, ch in enumerate(text) if ch == "\t"]
    i = random.Random(seed).choice(tabs)
    damaged = text[:i] + text[i + 1:]
    try:
        got = parse_topo(damaged, path="synthetic").to_profile()
    except UsageError:
        return
    assert got == ref


# ---- every single lost tab (or tab-stop of spaces) in every real capture: refused or harmless ----

from pathlib import Path  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "topo"
GOOD = sorted(p.name for p in FIX.iterdir() if p.name not in (
    "dgx-h100-12nic-vllm-13855-paste-merged-columns-gpu-rows.txt", "dgx-a100-topo-c-48-and-c-222.txt"))


def _damaged_variants(text):
    for i, ch in enumerate(text):
        if ch == "\t":
            yield text[:i] + text[i + 1:]                      # a tab lost
    for m in re.finditer(r" {2,}", text):                     # space-expanded: a tab stop lost, or all of it
        for cut in {min(8, len(m.group())), len(m.group())}:
            yield text[:m.start()] + text[m.start() + cut:]


@pytest.mark.parametrize("name", GOOD)
def test_synthetic_damage_to_real_capture_is_refused_or_harmless(name):
    text = (FIX / name).read_text()
    ref = parse_topo(text).to_profile()
    for damaged in _damaged_variants(text):
        try:
            got = parse_topo(damaged).to_profile()
        except UsageError:
            continue
        assert got == ref
