"""Property: `slurmkit check --capture xid=FILE` gives the same verdict for the same events in every log format.
Real dmesg captures are rewritten (SYNTHETIC prefixes, the real message text) into dmesg -T / -H, syslog,
kern.log, journal short-iso / short-precise, RFC3339, `dmesg --decode --time-format iso` and no prefix at all."""
import json
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from clirun import run_cli

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "xid"
CAPTURES = ["h100-hgx-fallen-off-bus-probe-failed-dmesg-multiline.txt",
            "tesla-dmesg-aer-uncorrected-fatal-surprise-down-no-aer-aware-driver-xid79-gpu-burn-1.txt",
            "rtx3090-dmesg-rminitadapter-gsp-init-failed-gfw-boot-ogkm-789.txt",
            "laptop-dmesg-rminitadapter-failed-inconsistent-ts-padding-system76-528.txt",
            "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt",
            "gpud-hgx-dmesg-xid79-plus-sxid20034-nvswitch.txt",
            "laptop-dmesg-benign-nvrm-open-module-load-chipset-setup-error-ogkm-489.txt"]
HEAD = re.compile(r"^\[\s*(\d+\.\d+)\] ?(.*)$")


def messages(text):
    """[(seconds since boot, [first line, continuation lines...])] of a dmesg capture."""
    out = []
    for line in text.splitlines():
        m = HEAD.match(line)
        if m:
            out.append((float(m.group(1)), [m.group(2)]))
        elif line.strip() and out:
            out[-1][1].append(line.strip())
    return out


def wall(base, t):
    return time.gmtime(base + int(t)), f"{t % 1:.6f}"[2:]


def render(fmt, msgs, host, base):
    lines, prev = [], None
    for t, (first, *cont) in msgs:
        g, us = wall(base, t)
        mon, day, hms = time.strftime("%b", g), g.tm_mday, time.strftime("%H:%M:%S", g)
        iso = time.strftime("%Y-%m-%dT%H:%M:%S", g)
        each = {  # a prefix on every line of the message (syslog and journal write continuation lines so)
            "syslog": f"{mon} {day:2d} {hms} {host} kernel: ",
            "kern.log": f"{mon} {day:2d} {hms} {host} kernel: [{t:12.6f}] ",
            "short-iso": f"{iso}+0000 {host} kernel: ",
            "short-precise": f"{mon} {day:02d} {hms}.{us} {host} kernel: ",
            "rfc3339": f"{iso}.{us}+00:00 {host} kernel: ",
            "decode-iso": f"kern  :err   : {iso},{us}+00:00 ",
            "bare": "",
        }
        if fmt in each:
            lines += [each[fmt] + x for x in [first, *cont]]
            continue
        prefix = {"dmesg": f"[{t:12.6f}] ", "dmesg-T": f"[{time.strftime('%a %b %e %H:%M:%S %Y', g)}] ",
                  "dmesg-H": f"[  +{(t - prev) if prev is not None else 0:.6f}] "}[fmt]
        prev = t
        lines.append(prefix + first)                 # dmesg indents continuation lines under the message
        lines += [" " * len(prefix) + x for x in cont]
    return "\n".join(lines) + "\n"


FORMATS = ["dmesg", "dmesg-T", "dmesg-H", "syslog", "kern.log", "short-iso", "short-precise", "rfc3339",
           "decode-iso", "bare"]


def check(text, capsys=None):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "kern.txt")
        with open(p, "w") as f:
            f.write(text)
        cfg = os.path.join(d, "c.yaml")
        open(cfg, "w").close()
        rc, out, _ = run_cli(["--config", cfg, "check", "--capture", f"xid={p}", "--json"])
        (r,) = json.loads(out)["results"]
        return rc, r["status"], r["reason"]


EXPECTED = {name: check(render("dmesg", messages((FIX / name).read_text()), "n1", 1700000000)) for name in CAPTURES}


def test_the_dmesg_rendering_keeps_the_real_verdict():
    for name in CAPTURES:
        assert EXPECTED[name] == check((FIX / name).read_text()), name


@settings(max_examples=60, deadline=None, derandomize=True)
@given(name=st.sampled_from(CAPTURES), fmt=st.sampled_from(FORMATS),
       host=st.from_regex(r"[a-z][a-z0-9-]{0,14}", fullmatch=True),
       base=st.integers(min_value=946684800, max_value=2000000000))
def test_same_events_same_verdict_in_every_format(name, fmt, host, base):
    text = render(fmt, messages((FIX / name).read_text()), host, base)
    assert check(text) == EXPECTED[name], text


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_once(fmt):
    for name in CAPTURES:
        text = render(fmt, messages((FIX / name).read_text()), "gpu-node-7", 1717787536)
        assert check(text) == EXPECTED[name], (name, text)
