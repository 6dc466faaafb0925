"""ib: a node's InfiniBand ports. Real captures: the four fabric captures in tests/fixtures/ib/ (iblinkinfo filtered
by `grep Up`, a full iblinkinfo with 32 empty `Down/ Polling` switch ports, ibnetdiscover of 2xNDR split ports with
redacted GUIDs, `ibnetdiscover -p`), all healthy. No capture shows a faulty port, and none is `ibstat` output: the
faults (a port LinkUp but Initializing, a link trained down to DDR, a required port Down/Polling, an HCA gone) are
synthetic, made from a real capture by changing one line or written to ibstat's layout (tests/unit/health/test_ibstat.py), and named
so. The live tests run the check through proc.py against small scripts standing in for ibstat."""
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.health.checks import ib
from slurmkit.health.runner import run_checks

from sitesettings import make_settings
from unit.health.test_ibstat import NDR8, synthetic_ibstat  # noqa: E402

REPO = Path(__file__).resolve().parents[4]
FIX = REPO / "tests" / "fixtures" / "ib"
EDR = FIX / "edr-sb7700-3host-iblinkinfo-grep-up.txt"
QDR = FIX / "qdr-infiniscale-iv-4hca-iblinkinfo-32-ports-down-polling-4space-ca-indent.txt"
NDR200 = FIX / "ndr200-qm9700-split-ports-ibnetdiscover-redacted-guids-omitted-tail.txt"
OSC = FIX / "osc-edr-ibnetdiscover-p-ports-subset-node-name-map-4x-unknown-speed-port.txt"
EXPECTED = {EDR: ("ok", 3), QDR: ("ok", 4), NDR200: ("ok", 5), OSC: ("ok", 3)}  # status, host ports judged


def judge(text, s=None, node="admin-ws"):
    (r,) = run_checks(s or make_settings(), "full", captures={"ib": text}, node=node).results
    return r


def site(yaml: str):
    return make_settings(yaml)


def test_every_real_ib_capture_is_judged():
    assert set(FIX.iterdir()) == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name[:40])
def test_real_capture_verdict(path):
    status, n = EXPECTED[path]
    r = judge(path.read_text())
    assert (r.status, r.evidence["ports_total"], r.evidence["scope"]) == (status, n, "fabric"), r.reason
    assert "admin-ws not among them" in r.reason


def test_the_32_empty_switch_ports_of_the_qdr_capture_are_not_faults():
    r = judge(QDR.read_text(), node="kube-node-100")
    assert r.status == "ok" and r.evidence["scope"] == "node" and r.evidence["ports_total"] == 1, r.reason
    assert r.reason == "1 InfiniBand port Active/LinkUp at 40 Gb/s (4xQDR)"


def test_a_node_in_a_fabric_capture_is_judged_on_its_own_ports_and_the_fabrics_rate():
    r = judge(EDR.read_text(), node="n01")
    assert r.status == "ok" and [p["host"] for p in r.evidence["ports"]] == ["n01"]
    assert r.evidence["reference_gbps"] == 100.0
    # a site's FQDN node descriptions match the short Slurm name
    fq = EDR.read_text().replace('"n01 HCA-1"', '"n01.cluster HCA-1"')
    assert judge(fq, node="n01").evidence["scope"] == "node"


def _n01_at(link: str) -> str:
    """synthetic: the real EDR capture with n01's link (both ends) changed to `link`."""
    text = EDR.read_text()
    lines = text.splitlines(keepends=True)
    for i in (3, 5):  # the switch's line to n01 and n01's own line
        lines[i] = lines[i].replace("4X      25.78125 Gbps Active/  LinkUp", link)
    assert lines != text.splitlines(keepends=True)
    return "".join(lines)


def test_synthetic_a_link_trained_down_to_ddr_warns_and_fails_where_the_site_says():
    ddr = _n01_at("4X       5.0 Gbps Active/  LinkUp")
    r = judge(ddr, node="n01")
    assert r.status == "warn" and "n01 HCA-1:1: slower than the other host ports (20 Gb/s (4xDDR), the others 100" in r.reason
    assert judge(ddr, site("ib:\n  min_rate: 100\n"), node="n01").status == "fail"
    strict = site("ib:\n  fail_on: [missing, down, not_active, rate_low, width_low, below_peers]\n")
    r = judge(ddr, strict, node="n01")
    assert r.status == "fail" and r.evidence["conditions"][0]["condition"] == "below_peers"
    assert judge(ddr, strict, node="n02").status == "ok"  # n02's link is fine
    # the whole capture judged (no node named): n01 is named among the hosts
    assert "n01 HCA-1:1" in judge(ddr, strict).reason
    narrow = _n01_at("1X      25.78125 Gbps Active/  LinkUp")
    r = judge(narrow, site("ib:\n  min_width: 4\n"), node="n01")
    assert r.status == "fail" and "width under ib.min_width (1x < 4x)" in r.reason


def test_synthetic_a_port_linkup_but_initializing_fails_as_no_subnet_manager():
    r = judge(_n01_at("4X      25.78125 Gbps Initialize/  LinkUp"), node="n01")
    assert r.status == "fail" and r.code == "ib"
    assert "n01 HCA-1:1: LinkUp but not Active (no subnet manager made it usable) (State Initialize)" in r.reason


def test_synthetic_a_hosts_empty_port_is_fine_until_the_site_requires_it():
    # synthetic: kube-node-100's HCA line turned into an empty port (iblinkinfo's Down/ Polling, no peer)
    text = QDR.read_text().replace(
        '    0x0002c903000d7aad      5    1[  ] ==( 4X          10.0 Gbps Active/ LinkUp)==>       2    4[  ] '
        '"Infiniscale-IV Mellanox Technologies" ( )',
        '    0x0002c903000d7aad      5    1[  ] ==(                Down/ Polling)==>             [  ] "" ( )')
    text = text.replace('"kube-node-100 HCA-1" ( )', '"kube-node-100 HCA-1" ( )').replace(
        "           2    4[  ] ==( 4X          10.0 Gbps Active/  LinkUp)==>       5    1[  ] \"kube-node-100 HCA-1\" ( )\n",
        "           2    4[  ] ==(                Down/ Polling)==>             [  ] \"\" ( )\n")
    r = judge(text, node="kube-node-100")
    # nothing says kube-node-100 has IB, and its only port is down: a warning, not a drain
    assert r.status == "warn" and "no InfiniBand port up" in r.reason
    r = judge(text, site("ib:\n  required: [HCA-1]\n"), node="kube-node-100")
    assert r.status == "fail" and "kube-node-100 HCA-1:1: required but down (Down/Polling)" in r.reason


# ---- ibstat (synthetic, rdma-core's layout) ----

def test_synthetic_ibstat_of_a_healthy_8_hca_ndr_node():
    r = judge(synthetic_ibstat(NDR8), site("ib:\n  min_active: 8\n  min_rate: 400\n"))
    assert (r.status, r.reason) == ("ok", "8 InfiniBand ports Active/LinkUp at 400 Gb/s"), r.reason
    assert r.evidence["scope"] == "node" and r.evidence["source"] == "ibstat"


def _ndr8(**change):
    rows = [list(p) for p in NDR8]
    for i, (state, phys, rate) in change.items():
        rows[int(i[1:])][2:5] = [state, phys, rate]
    return synthetic_ibstat([tuple(r) for r in rows])


def test_synthetic_ibstat_faults():
    r = judge(_ndr8(p3=("Active", "LinkUp", "200")))
    assert r.status == "warn" and "mlx5_3:1: slower than the other host ports (200 Gb/s, the others 400 Gb/s)" in r.reason
    assert judge(_ndr8(p3=("Active", "LinkUp", "200")), site("ib:\n  min_rate: 400\n")).status == "fail"
    r = judge(_ndr8(p5=("Armed", "LinkUp", "400")))
    assert r.status == "fail" and "mlx5_5:1: LinkUp but not Active" in r.reason
    # an empty port nobody listed: ok, and said
    r = judge(_ndr8(p7=("Down", "Polling", "10")))
    assert r.status == "ok" and r.reason.endswith("; 1 down, not required (empty ports)")
    r = judge(_ndr8(p7=("Down", "Polling", "10")), site("ib:\n  required: [mlx5_7]\n"))
    assert r.status == "fail" and r.reason == "mlx5_7:1: required but down (Down/Polling)"
    r = judge(_ndr8(p7=("Down", "Disabled", "10")), site("ib:\n  min_active: 8\n"))
    assert r.status == "fail" and "fewer Active InfiniBand ports than ib.min_active (7 < 8)" in r.reason
    # an HCA that fell off the bus is not in ibstat at all
    r = judge(synthetic_ibstat(NDR8[:7]), site("ib:\n  required: [mlx5_0, mlx5_7, 'mlx5_1:2']\n"))
    assert r.status == "fail" and "mlx5_7: required but not found" in r.reason and "mlx5_1:2" in r.reason


def test_synthetic_ethernet_ports_are_judged_only_when_required():
    text = synthetic_ibstat(NDR8[:2] + [("mlx5_8", 1, "Down", "Disabled", "100", "Ethernet")])
    assert judge(text).status == "ok"
    r = judge(text, site("ib:\n  required: ['mlx5_8:1']\n"))
    assert r.status == "fail" and "mlx5_8:1: required but down" in r.reason
    only_eth = synthetic_ibstat([("mlx5_0", 1, "Active", "LinkUp", "100", "Ethernet")])
    assert judge(only_eth).status == "skip"


def test_conditions_are_config_and_a_bad_entry_is_refused_with_its_line():
    r = judge(_ndr8(p5=("Initializing", "LinkUp", "400")), site("ib:\n  fail_on: []\n  warn_on: [not_active]\n"))
    assert r.status == "warn"
    for bad, what in (("  required: [mlx5_0, 'mlx5_1:one']\n", "not an HCA port"),
                      ("  warn_on: [below_peer]\n", "below_peer"), ("  min_rate: 0\n", "min_rate")):
        with pytest.raises(UsageError, match=what) as e:
            site("ib:\n" + bad)
        assert (e.value.path, e.value.line) == ("site.yaml", 2)


@pytest.mark.parametrize("text, what", [
    ("", "no HCA port"),
    ("hello world\n", "not an ibnetdiscover line"),
    (synthetic_ibstat(NDR8[:1]).replace("\t\tRate: 400\n", ""), "port 1 has no Rate"),
    (synthetic_ibstat(NDR8[:2])[:-200], "cut short"),
])
def test_a_capture_the_check_cannot_read_is_a_usage_error_never_ok(text, what):
    with pytest.raises(UsageError, match=what):
        judge(text)


def test_the_cli_names_the_file_and_line_of_an_unreadable_capture(tmp_path):
    f = tmp_path / "ibstat.txt"
    f.write_text(synthetic_ibstat(NDR8[:1]).replace("Rate: 400", "Rate: lots"))
    r = subprocess.run([sys.executable, "-m", "slurmkit", "check", "--capture", f"ib={f}"], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and f"{f}:11:" in r.stderr and "Rate 'lots'" in r.stderr, r.stderr


# ---- live: ibstat through proc.py ----

def _tool(tmp_path, body: str) -> str:
    t = tmp_path / "ibstat"
    t.write_text("#!/bin/sh\n" + body)
    t.chmod(0o755)
    return str(t)


def live(tmp_path, ibstat, extra="", tools=""):
    s = make_settings(f"tools:\n  ibstat: {ibstat}\n{tools}health:\n  command_timeout: 1\n{extra}")
    (r,) = run_checks(s, "full", only=["ib"], node="n1").results
    return r


def test_live_a_node_without_infiniband_skips_and_one_that_should_have_it_fails(tmp_path):
    absent = str(tmp_path / "no-such-ibstat")
    r = live(tmp_path, absent)
    assert r.status == "skip" and "no ibstat on this node" in r.reason
    r = live(tmp_path, absent, "ib:\n  required: [mlx5_0]\n")
    assert r.status == "fail" and "not found" in r.reason and r.code == "ib"
    # no IB stack loaded: ibstat's own panic, exit 255
    umad = _tool(tmp_path, "echo \"ibpanic: [123] main: can't init UMAD library: (No such file or directory)\" >&2\n"
                           "exit 255\n")
    r = live(tmp_path, umad)
    assert r.status == "skip" and "can't init UMAD library" in r.reason
    r = live(tmp_path, umad, "ib:\n  min_active: 1\n")
    assert r.status == "fail" and "exited 255" in r.reason
    # the stack is there and lists no HCA: ibstat prints nothing
    empty = _tool(tmp_path, "exit 0\n")
    assert live(tmp_path, empty).status == "skip"
    r = live(tmp_path, empty, "ib:\n  min_active: 1\n")
    assert r.status == "fail" and "0 < 1" in r.reason


def test_live_a_hung_or_garbled_ibstat_is_a_finding(tmp_path):
    r = live(tmp_path, _tool(tmp_path, "exec sleep 30\n"))
    assert r.status == "fail" and "timed out" in r.reason and r.seconds < 10
    r = live(tmp_path, _tool(tmp_path, "echo 'Segmentation fault'\n"))
    assert r.status == "fail" and r.reason.startswith("ibstat output unreadable: not ibstat output")
    other = _tool(tmp_path, "echo oops >&2; exit 3\n")
    r = live(tmp_path, other)
    assert r.status == "fail" and "exited 3: oops" in r.reason


def test_live_ibstat_is_judged(tmp_path):
    good = tmp_path / "ibstat.out"
    good.write_text(_ndr8(p3=("Initializing", "LinkUp", "400")))
    r = live(tmp_path, _tool(tmp_path, f"cat {good}\n"))
    assert r.status == "fail" and r.reason.startswith("mlx5_3:1: LinkUp but not Active")
    good.write_text(synthetic_ibstat(NDR8))
    r = live(tmp_path, _tool(tmp_path, f"cat {good}\n"), "ib:\n  min_active: 8\n")
    assert r.status == "ok", r.reason


def test_evidence_stays_bounded_on_a_huge_fabric_capture():
    lines = ["CA: big HCA-1:"]
    for i in range(2000):
        lines.append(f"      0x{i + 1:016x}   {i + 10:5d}    1[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>"
                     f"       2   {i % 36 + 1:2d}[  ] \"sw\" ( )")
    r = ib.evaluate("\n".join(lines) + "\n", make_settings().ib, node="x")
    assert r.status == "ok" and r.evidence["ports_total"] == 2000 and len(r.evidence["ports"]) == 64


def test_the_prolog_drains_on_a_port_no_subnet_manager_made_active(tmp_path):
    """The real prolog script (no PATH, as slurmd runs it) on the fake node of dev/fakegpu/scenarios/ib-port-init."""
    fake = REPO / "dev" / "fakegpu" / "bin"
    cfg = tmp_path / "slurmkit.yaml"
    cfg.write_text(f"""tools:
  nvidia_smi: {fake}/nvidia-smi
  dmesg: {fake}/dmesg
  all_reduce_perf: {fake}/all_reduce_perf
  ibstat: {fake}/ibstat
paths:
  state_dir: {tmp_path}/state
  health_log: {tmp_path}/health.jsonl
gpu_count:
  expected: 8
health:
  drain: false
  command_timeout: 5
""")
    env = {"SLURMKIT_CONFIG": str(cfg), "SLURMD_NODENAME": "n7", "SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "0,1",
           "SLURMKIT_FAKEGPU_SCENARIO": str(REPO / "dev" / "fakegpu" / "scenarios" / "ib-port-init"),
           "SLURMKIT_PYTHON": sys.executable}
    r = subprocess.run([str(REPO / "prolog" / "prolog")], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "slurmkit:ib mlx5_3:1: LinkUp but not Active" in r.stderr, r.stderr
    import json
    recs = {x["check"]: x for x in map(json.loads, (tmp_path / "health.jsonl").read_text().splitlines())}
    assert recs["ib"]["status"] == "fail" and recs["ib"]["evidence"]["active"] == 7
    assert all(x["status"] != "fail" for c, x in recs.items() if c != "ib"), recs
    from slurmkit import audit
    cause, _ = audit.load_causes().classify("slurmkit:ib mlx5_3:1: LinkUp but not Active", "slurmkit:")
    assert cause.id == "ib" and "subnet manager" in cause.next


# ---- counters: LinkDownedCounter / SymbolErrorCounter growing between live runs (synthetic perfquery) ----

def perfquery_text(link_downed=0, symbol_error=0, lid=12, port=1) -> str:
    """synthetic: perfquery's port counters in infiniband-diags' layout (name, dots to column 33, value)."""
    rows = [("PortSelect", port), ("CounterSelect", "0x0000"), ("SymbolErrorCounter", symbol_error),
            ("LinkErrorRecoveryCounter", 0), ("LinkDownedCounter", link_downed), ("PortRcvErrors", 0),
            ("PortXmitData", 123456789012), ("PortRcvData", 98765432109)]
    return f"# Port counters: Lid {lid} port {port} (CapMask: 0x5A00)\n" + "".join(
        f"{k}:{'.' * (32 - len(k))}{v}\n" for k, v in rows)


def test_synthetic_perfquery_reads_and_refuses_what_it_cannot_read():
    from slurmkit.health import ibstat
    assert ibstat.parse_perfquery(perfquery_text(3, 250)) == {"link_downed": 3, "symbol_error": 250}
    for bad, what in ((perfquery_text().replace("LinkDownedCounter", "LinkDowned Counter"), "not a perfquery line"),
                      (perfquery_text(link_downed=256), "not a 8-bit count"),
                      (perfquery_text().replace("SymbolErrorCounter", "SymbolErrors"), "no SymbolErrorCounter"),
                      ("", "no LinkDownedCounter")):
        with pytest.raises(UsageError, match=what):
            ibstat.parse_perfquery(bad)


def test_growth_is_judged_against_the_last_reading_and_a_reset_is_a_new_baseline():
    s = make_settings().ib
    prev = {"mlx5_0:1": {"link_downed": 2, "symbol_error": 100}, "mlx5_1:1": {"link_downed": 5, "symbol_error": 7}}
    now = {"mlx5_0:1": {"link_downed": 3, "symbol_error": 111}, "mlx5_1:1": {"link_downed": 0, "symbol_error": 0},
           "mlx5_2:1": {"link_downed": 9, "symbol_error": 9}}
    found, reset = ib.growth(prev, now, s)
    assert found == [("mlx5_0:1", "link_downed", "+1, now 3"), ("mlx5_0:1", "symbol_errors", "+11, now 111")]
    assert reset == ["mlx5_1:1"]  # counters cleared (perfquery -R) or a reboot; mlx5_2 is first seen
    assert ib.growth(prev, {"mlx5_0:1": {"link_downed": 2, "symbol_error": 110}}, s) == ([], [])


def test_live_a_link_that_flapped_between_two_hook_runs_fails_until_a_hook_acted(tmp_path):
    out = tmp_path / "ibstat.out"
    out.write_text(synthetic_ibstat(NDR8[:2]))
    pq = tmp_path / "pq"
    pq.mkdir()
    perfquery = tmp_path / "perfquery"
    perfquery.write_text(f'#!/bin/sh\n[ "$1 $3" = "-C -P" ] || exit 9\ncat "{pq}/$2-$4.txt"\n')
    perfquery.chmod(0o755)

    def reading(downed, sym=0):
        for hca in ("mlx5_0", "mlx5_1"):
            (pq / f"{hca}-1.txt").write_text(perfquery_text(downed if hca == "mlx5_1" else 0, sym))

    extra = f"paths:\n  state_dir: {tmp_path}/state\nib:\n  counters: true\n"
    tools = f"  perfquery: {perfquery}\n"
    ibstat_tool = _tool(tmp_path, f"cat {out}\n")
    reading(4)
    r = live(tmp_path, ibstat_tool, extra, tools)  # first run: the baseline
    assert r.status == "ok" and "read (first baseline)" in r.reason and r.commit is not None, r.reason
    r.commit()
    reading(6, sym=30)
    r = live(tmp_path, ibstat_tool, extra, tools)
    assert r.status == "fail" and r.reason.startswith("mlx5_1:1: link went down since the last run"), r.reason
    assert "(+2, now 6)" in r.reason and r.evidence["counters"]["ports"]["mlx5_1:1"] == {"link_downed": 6,
                                                                                          "symbol_error": 30}
    # no hook acted on it (no commit): the next run still sees the flap; once acted on, the readings are the baseline
    assert live(tmp_path, ibstat_tool, extra, tools).status == "fail"
    r.commit()
    assert live(tmp_path, ibstat_tool, extra, tools).status == "ok"
    # a perfquery that cannot run or answers garbage is a finding, never ok
    (pq / "mlx5_0-1.txt").write_text("ibwarn: [1234] mad_rpc: _do_madrpc failed; dport (Lid 12)\n")
    r = live(tmp_path, ibstat_tool, extra, tools)
    assert r.status == "fail" and r.reason.startswith("perfquery output unreadable"), r.reason
    perfquery.write_text("#!/bin/sh\necho 'ibpanic: can not open umad port' >&2\nexit 255\n")
    r = live(tmp_path, ibstat_tool, extra, tools)
    assert r.status == "fail" and "exited 255" in r.reason, r.reason


def test_a_large_fabric_capture_is_judged_in_bounded_time():
    """synthetic: 20,000 hosts on iblinkinfo, one of them trained down: no per-host pass over the whole capture."""
    import time
    lines = []
    for i in range(20000):
        speed = "5.0" if i == 12345 else "25.78125"
        lines.append(f"CA: h{i:05d} HCA-1:\n      0x{i + 1:016x}   {i + 10:5d}    1[  ] ==( 4X {speed} Gbps Active/  "
                     f"LinkUp)==>       2   {i % 36 + 1:2d}[  ] \"sw\" ( )")
    text = "\n".join(lines) + "\n"
    t0 = time.monotonic()
    r = ib.evaluate(text, make_settings().ib, node="x")
    assert time.monotonic() - t0 < 20
    assert r.status == "warn" and r.reason.startswith("h12345 HCA-1:1: slower than the other host ports"), r.reason
    assert r.evidence["ports_total"] == 20000 and len(r.evidence["conditions"]) == 1
