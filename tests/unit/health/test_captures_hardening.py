"""Issue 17, the health checks' captured input: unreadable input is an error (exit 2 for a captured file) or a
warn, never ok; every input has a size bound. Inputs marked synthetic are made here. (The issue's topology, audit
and hostlist items are in topology/test_parse.py, topology/test_cpus.py, audit/test_audit.py, core/test_hostlist.py.)"""
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.health import nccl as nccl_parse, nvsmi
from slurmkit.health.base import to_int
from slurmkit.health.checks import nccl as nccl_check
from slurmkit.health.context import NoData

from clirun import run_cli
from sitesettings import make_settings

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures"
H100_Q = FIX / "ecc" / "princeton-pli-h100-80gb-hbm3-nvidia-smi-a-healthy.txt"
TOPO = sorted((FIX / "topo").glob("*.txt"))[0]
NCCL_OK = FIX / "nccl" / "gcp-a3mega-h100-2node-16gpu-all_reduce_perf-healthy.txt"
S = make_settings("{}\n")



@pytest.fixture(autouse=True)
def _site(tmp_path):
    (tmp_path / "none.yaml").write_text("{}\n")     # an empty site config: every default


def _check(tmp_path, check, text, *extra):
    p = tmp_path / f"{check}.txt"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return run_cli(["--config", str(tmp_path / "none.yaml"), "check", "--only", check, "--capture", f"{check}={p}",
                 *extra])


def _all_na(text: str) -> str:
    """Synthetic: a real `nvidia-smi -q` with every value replaced by N/A."""
    out = []
    for ln in text.splitlines():
        m = re.match(r"^(\s+[^:]+?\s+:\s)(.*)$", ln) or re.match(r"^([^:]+?\s+:\s)(.*)$", ln)
        out.append(m.group(1) + "N/A" if m and not ln.startswith("GPU ") else ln)
    return "\n".join(out) + "\n"


# --- W1 / T2: NCCL --------------------------------------------------------------------------------------------------

ROW = "    {size}     {count}     float     sum      -1    {t}  {bw}  {bw}      0    {t}  {bw}  {bw}      0"


def _table(bw: str, footer: str | None) -> str:
    rows = [ROW.format(size=s, count=s // 4, t="12.3", bw=bw) for s in (1048576, 2097152, 4194304)]
    head = "# nccl-tests (synthetic)\n#       size         count      type   redop    root     time   algbw   busbw " \
           "#wrong     time   algbw   busbw #wrong\n"
    tail = f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {footer}\n" if footer is not None else ""
    return head + "\n".join(rows) + "\n" + tail


@pytest.mark.parametrize("bw,footer", [("nan", None), ("inf", None), ("nan", "nan"), ("1.00", "1" * 400),
                                       ("1.00", "1e400"), ("1.00", "."), ("1.00", "1.2.3"), ("1.00", "inf"),
                                       ("1" * 5000, None)])
def test_w1_t2_unreadable_nccl_numbers_are_never_healthy(tmp_path, bw, footer):
    text = _table(bw, footer)
    with pytest.raises(NoData, match="unreadable"):
        nccl_check.evaluate(text, None, S.nccl)
    code, out, err = _check(tmp_path, "nccl", text)
    assert code == 2 and "unreadable all_reduce_perf output" in err and "Traceback" not in err


def test_w1_a_truncated_capture_says_so():
    r = nccl_check.evaluate(_table("0.00", None), None, S.nccl)
    assert "no `# Avg bus bandwidth` footer (truncated?)" in r.reason
    assert r.evidence["footer"] is False


def test_w1_json_never_holds_nan(tmp_path):
    from slurmkit.output import emit_json
    buf = io.StringIO()
    emit_json({"a": float("nan"), "b": [float("inf"), 1.5]}, buf)
    doc = json.loads(buf.getvalue(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert doc == {"a": None, "b": [None, 1.5]}


def test_nccl_real_capture_is_still_read():
    p = nccl_parse.parse(NCCL_OK.read_text())
    assert p["avg_bus_bandwidth_gbps"] == 70.742 and p["unreadable"] == [] and p["footer"]


def test_t1_nccl_huge_integers_do_not_raise():
    text = _table("1.00", "1.00") + "# Out of bounds values : " + "9" * 5000 + " OK\n"
    with pytest.raises(NoData, match="not a count"):
        nccl_check.evaluate(text, None, S.nccl)


# --- W3: nvlink, all-N/A nvidia-smi -q, pcie wording ----------------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"\x00\xffGPU\x13\x99" * 50, b"hello GPU world\n"])
def test_w3_nvlink_unreadable_input_is_exit_2(tmp_path, data):
    code, out, err = _check(tmp_path, "nvlink", data)
    assert code == 2 and "no NVLink status" in err


def test_w3_nvlink_gpus_without_links_is_no_nvlink():
    from slurmkit.health.checks import nvlink
    r = nvlink.evaluate("GPU 0: NVIDIA RTX A6000 (UUID: GPU-x)\nGPU 1: NVIDIA RTX A6000 (UUID: GPU-y)\n", "",
                        S.nvlink)
    assert r.status == "ok" and "no NVLink" in r.reason


@pytest.mark.parametrize("check", ["ecc", "driver", "pcie", "gpu_procs"])
def test_w3_all_na_q_is_unreadable(tmp_path, check):
    code, out, err = _check(tmp_path, check, _all_na(H100_Q.read_text()))
    assert code == 2, (out, err)


def test_w3_all_na_q_gpu_count_warns(tmp_path):
    code, out, err = _check(tmp_path, "gpu_count", _all_na(H100_Q.read_text()), "--json")
    r = json.loads(out)["results"][0]
    assert r["status"] == "warn" and "nothing but N/A" in r["reason"]


def test_w3_pcie_one_link_wording():
    from slurmkit.health.checks import pcie
    r = pcie.evaluate(H100_Q.read_text(), S.pcie)
    assert r.status == "ok" and r.reason == "1 GPU link at its max width"


# --- W7 / T1 / T3 / H4: nvidia-smi -q numbers and processes ---------------------------------------------------------

def test_w7_superscript_digits_are_not_numbers():
    assert to_int("²³ MiB") is None and to_int("12 MiB") == 12 and to_int("9" * 5000) == 10 ** 18
    text = H100_Q.read_text().replace("Processes                             : None",
                                      "Processes\n        Process ID                        : ²\n")
    procs = nvsmi.processes(nvsmi.parse_q(text)["gpus"][0]["tree"])
    assert procs and procs[0]["pid"] == "²"


def test_t1_huge_q_counter_fails_closed(tmp_path):
    """A 5,000-digit volatile counter (int() raised ValueError) is over any threshold: a finding, not a crash."""
    text = H100_Q.read_text().replace("SRAM Uncorrectable            : 0", "SRAM Uncorrectable            : "
                                      + "1" * 5000, 1)
    assert "1" * 5000 in text
    code, out, err = _check(tmp_path, "ecc", text)
    assert code == 1 and "Traceback" not in err and "volatile uncorrectable" in out


def test_h4_many_processes_parse_linearly():
    """Synthetic: one GPU with 20,000 processes (was quadratic: 10,000 ran past two minutes)."""
    body = "".join(f"        Process ID                        : {p}\n            Name                          : "
                   f"python\n            Used GPU Memory               : 10 MiB\n" for p in range(20000))
    text = "GPU 00000000:3B:00.0\n    Processes\n" + body
    tree = nvsmi.parse_q(text)["gpus"][0]["tree"]
    procs = nvsmi.processes(tree)
    assert len(procs) == 20000 and procs[-1]["pid"] == 19999


# --- H1: the per-node GPU count key ------------------------------------------------------------------------------

def test_h1_per_node_gpu_count_key_is_bounded():
    from slurmkit.health.checks.gpu_count import expected_for
    st = make_settings('gpu_count:\n  per_node:\n    "n[1-64]": 8\n    "n[1-99999999]": 4\n')
    assert expected_for(st, "n7") == 8
    with pytest.raises(UsageError, match="over the limit"):
        expected_for(st, "x1")


# --- H7 / H8: bounded reads of every captured file -----------------------------------------------------------------

def _cmds(p):
    return [["check", "--only", "ecc", "--capture", f"ecc={p}"], ["audit", "--from-file", str(p)],
            ["topo", "--topo-file", str(p)], ["topo", "--topo-file", str(TOPO), "--lscpu-file", str(p)]]


def test_h7_captures_over_the_limit_name_the_limit(tmp_path):
    from slurmkit.bounded import DEFAULT_LIMIT
    p = tmp_path / "big.txt"
    with open(p, "wb") as f:
        f.truncate(DEFAULT_LIMIT + 1)       # sparse
    (tmp_path / "none.yaml").write_text("{}\n")
    for argv in _cmds(p):
        code, out, err = run_cli(["--config", str(tmp_path / "none.yaml"), *argv])
        assert code == 2 and "over the limit of 64 MiB" in err, (argv, err)


@pytest.mark.parametrize("kind", ["fifo", "dev"])
def test_h8_fifo_or_device_is_refused_without_blocking(tmp_path, kind):
    if kind == "fifo":
        p = tmp_path / "cap.txt"
        os.mkfifo(p)
    else:
        p = Path("/dev/zero")
    (tmp_path / "none.yaml").write_text("{}\n")
    for argv in _cmds(p):
        if argv[0] == "topo" and "--lscpu-file" in argv:
            continue     # the topo file is read first; covered by the --topo-file case
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "--config", str(tmp_path / "none.yaml"), *argv],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode == 2 and ("FIFO" in r.stderr or "device" in r.stderr), (argv, r.stderr)


