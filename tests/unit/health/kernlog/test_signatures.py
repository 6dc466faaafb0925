"""The kernel-log check beyond `Xid` lines: each signature class on SYNTHETIC lines written in the driver's own
wording (the real captures are graded in tests/unit/health/checks/test_xid.py), timestamps in every form, fail-closed reading of
odd Xid lines (issue 17 W3) and linear grading (issue 17 H3)."""
from pathlib import Path

import pytest

from slurmkit import config
from slurmkit.health import kernlog
from slurmkit.health.kernlog import logline
from unit.health.checks.test_xid import judge  # the xid check on a capture, with xid.* settings

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "xid"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


# --- fallen off the bus, every format ---------------------------------------------------------------------

OFFBUS = ["NVRM: The NVIDIA GPU 0000:5d:00.0", "NVRM: (PCI ID: 10de:2330) installed in this system has",
          "NVRM: fallen off the bus and is not responding to commands."]


@pytest.mark.parametrize("prefix", ["Jun  7 19:32:16 gpu7 kernel: ", "2024-06-07T19:32:16.123456+00:00 gpu7 kernel: ",
                                    "Jun 07 19:32:16.123456 gpu7 kernel: ", "2024-06-07T19:32:16+0000 gpu7 kernel: "])
def test_offbus_with_a_prefix_on_every_continuation_line(prefix):
    # SYNTHETIC: the real dmesg message (h100-hgx-fallen-off-bus-probe-failed) as syslog/journal write it
    r = judge("\n".join(prefix + x for x in OFFBUS) + "\n")
    assert (r.status, r.code) == ("fail", "xid79"), r.reason
    assert r.reason.startswith("GPU 0000:5d:00 fell off the bus") and "reboot" in r.reason


def test_offbus_codeless_line_alone():
    r = judge("[  12.5] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.\n")
    assert (r.status, r.code) == ("fail", "xid79") and "0000:01:00" in r.reason


# --- GPU lost ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    "NVRM: nvAssertOkFailedNoLog: Assertion failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F) "
    "returned from pRmApi->Control(pRmApi, RES_GET_CLIENT_HANDLE(pKernelChannel) @ kernel_channel.c:3801",
    "NVRM: GPU0 rpcSendMessage: rpcSendMessage failed with status 0x0000000f for fn 76!",
    "NVRM: GPU 0000:01:00.0: GPU is lost, skipping nvdEngineDumpCallbackHelper",
])
def test_gpu_lost(body):
    r = judge(f"Sep 12 14:25:45.000001 host kernel: {body}\n")
    assert (r.status, r.code) == ("fail", "xid_gpulost"), r.reason
    assert "lost" in r.reason and "reboot" in r.reason


def test_a_gpu_lost_flood_is_one_row_with_its_count_and_names_the_gpu():
    # SYNTHETIC flood after the real codeless line; the driver's GPU0 is the only GPU the log names
    lines = ["Sep 12 14:25:44.984255 host kernel: NVRM: GPU at PCI:0000:01:00: GPU-08abc463"]
    lines += [f"Sep 12 14:25:{45 + i // 1000:02d}.{i:06d} host kernel: NVRM: GPU0 rpcSendMessage: rpcSendMessage "
              f"failed with status 0x0000000f for fn 76!" for i in range(3000)]
    r = judge("\n".join(lines) + "\n")
    assert (r.status, r.code) == ("fail", "xid_gpulost")
    assert "GPU GPU0" in r.reason or "GPU 0000:01:00" in r.reason
    (g,) = r.evidence["groups"]
    assert g["count"] == 3000 and len(r.evidence["events"]) == 50


def test_a_gpu_named_only_by_the_drivers_number_is_named_so():
    r = judge("[ 1.0] NVRM: GPU at PCI:0000:01:00: x\n[ 1.1] NVRM: GPU at PCI:0000:02:00: y\n"
              "[ 9.0] NVRM: GPU1 rpcSendMessage: rpcSendMessage failed with status 0x0000000f for fn 10!\n")
    assert r.reason.startswith("GPU GPU1 ")


# --- a GPU the driver could not bring up ----------------------------------------------------------------------

@pytest.mark.parametrize("body,code", [
    ("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0x56:894)", "xid_rminit"),
    ("NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 3", "xid_rminit"),
    ("NVRM: osInitNvMapping: *** Cannot attach gpu", "xid_rminit"),
    ("nvidia: probe of 0000:3b:00.0 failed with error -1", "xid_rminit"),
    ("NVRM: kgspBootstrap_GH100: GSP-FMC reported an error while attempting to boot GSP: 0xb", "xid_gsp"),
    ("NVRM: GPU 0000:3b:00.0: GSP init failed", "xid_gsp"),
    ("NVRM: GPU 0000:3b:00.0: _kgspIsHeartbeatTimedOut: GSP heartbeat timed out", "xid_gsp"),
])
def test_a_gpu_the_driver_could_not_bring_up(body, code):
    r = judge(f"[ 5.123456] {body}\n")
    assert (r.status, r.code) == ("fail", code), r.reason
    assert any(w in r.reason for w in ("reboot", "reset"))


def test_minor_number_names_the_gpu():
    r = judge("[ 5.0] NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 3\n"
              "[ 6.0] NVRM: rm_init_adapter failed for device bearing minor number 2\n")
    assert "0000:3b:00" in r.reason
    assert "GPU minor 2" in judge("[ 6.0] NVRM: rm_init_adapter failed for device bearing minor number 2\n").reason


# --- benign NVRM lines -------------------------------------------------------------------------------------

BENIGN = [
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
    "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.15",
    "nvidia: probe of 0000:3b:00.0 returned 0 after 85123 usecs",
    "NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced.",
    "nvidia 0000:3b:00.0: enabling device (0000 -> 0003)",
    "nvidia 0000:18:00.0: Direct firmware load for nvidia/525.125.06/gsp_tu10x.bin failed with error -2",
    "NVRM: GPU 0000:3b:00.0: loading GSP firmware gsp_ga10x.bin",
    "NVRM objClInitPcieChipset: *** Chipset Setup Function Error!",
    "nvidia-uvm: Loaded the UVM driver, major device number 509.",
    "nvidia 0000:3b:00.0: AER: Corrected error received: 0000:3b:00.0",
    "pcieport 0000:00:02.0: AER: Corrected error received: id=0010",
]


def test_benign_nvrm_lines_stay_ok():
    r = judge("".join(f"[ {i}.000001] {b}\n" for i, b in enumerate(BENIGN)))
    assert r.status == "ok", r.reason


# --- PCIe AER ------------------------------------------------------------------------------------------------

def test_aer_fatal_on_the_gpu_itself():
    r = judge("[ 100.1] nvidia 0000:3b:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0\n"
              "[ 100.1] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible\n")
    assert (r.status, r.code) == ("fail", "xid_aer") and r.reason.startswith("GPU 0000:3b:00 had a fatal PCIe")


def test_aer_fatal_on_the_root_port_needs_the_gpu_in_the_same_burst():
    port = ("[74889.542031] pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: id=0010\n"
            "[74889.542184] pcieport 0000:00:02.0:    [ 5] Surprise Down Error    (First)\n")
    gpu_now = "[74889.542239] nvidia 0000:02:00.0: device has no AER-aware driver\n"
    gpu_later = "[79999.000000] nvidia 0000:02:00.0: device has no AER-aware driver\n"
    r = judge(port + gpu_now)
    assert (r.status, r.code) == ("fail", "xid_aer") and "GPU 0000:02:00" in r.reason
    r = judge(port + gpu_later)          # an hour later is not this burst: a port error alone warns
    assert r.status == "warn" and "PCIe port" in r.reason
    assert judge(port).status == "warn"


# --- Xid 154: the recovery action, and its cause ----------------------------------------------------------------

def test_xid154_reason_names_the_action_and_the_xid_before_it():
    r = judge("[ 10.0] NVRM: Xid (PCI:0000:01:00): 48, pid=1, name=python, An uncorrectable double bit error\n"
              "[ 10.1] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
              "(GPU Reset Required)\n", ignore=[48])
    assert (r.status, r.code) == ("fail", "xid154")
    assert r.reason.startswith("GPU 0000:01:00 needs a GPU reset (cause: Xid 48)"), r.reason
    r = judge("[ 10.0] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.\n"
              "[ 10.1] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
              "(Node Reboot Required)\n")
    assert r.reason.startswith("GPU 0000:01:00 needs a node reboot (cause: fell off the bus)"), r.reason


# --- lines userspace wrote -----------------------------------------------------------------------------------

INJECTED = (FIX / "gpud-fault-injector-dmesg-decode-iso-syslog-level-prefix-injected-xid79-gpud-870.txt").read_text()


@pytest.mark.parametrize("setting,status", [("warn", "warn"), ("fail", "fail"), ("ok", "ok")])
def test_userspace_lines_follow_the_setting(setting, status):
    r = judge(INJECTED, userspace=setting)
    assert r.status == status
    if status != "ok":
        assert "written by syslog, not the kernel" in r.reason
    (e,) = r.evidence["events"]
    assert e["source"] == "syslog"


def test_a_logger_line_in_syslog_is_userspace():
    r = judge(f"Jun  7 19:32:16 gpu7 root: {XID79}\n")
    assert r.status == "warn" and "written by root" in r.reason
    assert judge(f"Jun  7 19:32:16 gpu7 kernel: {XID79}\n").status == "fail"


def test_sites_silence_and_add_signatures():
    text = "[ 5.0] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0x56:894)\n"
    assert judge(text, ignore_signatures=["init_failed"]).status == "ok"
    r = judge("[ 5.0] NVRM: GPU 0000:3b:00.0: site-specific meltdown\n",
              signatures_extra=[{"id": "meltdown", "match": "NVRM: .*meltdown", "code": "xid_melt",
                                 "says": "melted", "todo": "call the vendor"}])
    assert (r.status, r.code, r.reason) == ("fail", "xid_melt", "GPU 0000:3b:00 melted; call the vendor")


def test_a_bad_site_signature_is_a_config_error(tmp_path):
    from slurmkit.errors import UsageError
    p = tmp_path / "c.yaml"
    p.write_text("xid:\n  signatures_extra:\n    - id: x\n      match: 'NVRM: ('\n")
    with pytest.raises(UsageError) as e:
        config.load(str(p))
    assert "bad regex" in str(e.value) and "c.yaml" in str(e.value)


# --- issue 17 W3: odd spellings of an Xid line never read as "no Xid events" -----------------------------------

@pytest.mark.parametrize("line", [
    "\tNVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "[ 12.0]\tNVRM:\tXid\t(PCI:0000:3b:00):\t79,\tGPU has fallen off the bus.",
    "[ 12.0] NVRM: Xid (PCI:00000000:3B:00.0): 79, GPU has fallen off the bus.",
    "[ 12.0] NVRM: Xid (PCI:0000:3b:00.0000): 79, GPU has fallen off the bus.",
    "Jun  7 19:32:16 gpu7 kernel: NVRM: Xid (0000:3B:00.0): 79, GPU has fallen off the bus.",
])
def test_odd_xid_spellings_are_read(line):
    r = judge(f"[ 11.0] something before\n{line}\n")
    assert (r.status, r.code) == ("fail", "xid79"), r.reason
    assert "GPU 0000:3b:00" in r.reason


@pytest.mark.parametrize("line", ["NVRM: Xid (PCI:zz:3b): 79, GPU has fallen off the bus.",
                                  "NVRM: Xid (PCI:0000:3b:00) 79 GPU has fallen off the bus",
                                  "nvidia-nvswitch0: SXid (PCI:??): 20034, Fatal"])
def test_an_xid_line_that_cannot_be_read_warns(line):
    r = judge(f"[ 12.0] {line}\n")
    assert r.status == "warn" and "could not read" in r.reason


# --- issue 17 H3: grading is linear ----------------------------------------------------------------------------

def test_twenty_thousand_sxid_lines_grade_in_one_pass():
    # SYNTHETIC: the real SXid 20034 line shape, 20,000 times (quadratic grading took over a minute here)
    text = "".join(f"[ {i}.000001] nvidia-nvswitch{i % 4}: SXid (PCI:0000:0{i % 4 + 5}:00.0): 20034, "
                   f"{'Fatal' if i % 2 else 'Non-fatal'}, Link {i % 64} LTSSM Fault Up\n" for i in range(20000))
    r = judge(text)
    assert (r.status, r.code) == ("fail", "sxid20034") and r.evidence["new_events"] == 20000


# --- timestamps in every form the shared fixtures show -------------------------------------------------------

@pytest.mark.parametrize("line,time", [
    ("[ 4254.197860] NVRM: x", "4254.197860"),
    ("[  104.659702] NVRM: x", "104.659702"),
    ("[  +0.000844] NVRM: x", "+0.000844"),
    ("[Fri Apr  5 21:29:39 2024] NVRM: x", "Fri Apr  5 21:29:39 2024"),
    ("Apr 24 13:23:29 banana kernel: NVRM: x", "Apr 24 13:23:29"),
    ("kwi 15 07:56:59 testowy kernel: NVRM: x", "kwi 15 07:56:59"),
    ("6月 28 02:52:53 jjf-Super-Server kernel: NVRM: x", "6月 28 02:52:53"),
    ("Sep 12 14:25:44.984246 pc-X3D kernel: NVRM: x", "Sep 12 14:25:44.984246"),
    ("syslog:err   : 2025-05-27T04:18:56,089671+00:00 NVRM: x", "2025-05-27T04:18:56,089671+00:00"),
    ("2024-04-05T21:29:39.123456+00:00 node7 kernel: NVRM: x", "2024-04-05T21:29:39.123456+00:00"),
    ("kern  :err   : [ 12.5] NVRM: x", "12.5"),
    ("NVRM: x", None),
])
def test_timestamps(line, time):
    body, t, source, _ = logline.split_prefix(line)
    assert (body, t, source) == ("NVRM: x", time, "syslog" if line.startswith("syslog") else "kernel")


def test_parse_keeps_its_old_signature():
    (e, *_) = kernlog.parse("[ 1.0] " + XID79 + "\n")
    assert (e.kind, e.code, e.pci, e.time) == ("xid", 79, "0000:3b:00", "1.0")
    assert kernlog.next_state([e], "b") == {"boot_id": "b", "last_line": e.line}
    assert kernlog.new_events([e], {"boot_id": "b", "last_line": e.line}, "b") == []


# --- never a traceback, whatever the input ----------------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

FRAGMENTS = ["NVRM: ", "Xid ", "(PCI:", "0000:3b:00", ".0", "): ", "79", ", ", "SXid ", "nvidia-nvswitch0: ",
             "AER: Uncorrected (Fatal) ", "pcieport 0000:00:02.0: ", "nvidia 0000:02:00.0: ", "Surprise Down",
             "[ 12.5] ", "[  +0.1] ", "Jun  7 19:32:16 h kernel: ", "syslog:err   : ", "\n", "\t", "  ", "GPU0 ",
             "RmInitAdapter failed", "minor number 3", "fallen off the bus", "rpcSendMessage failed with status 0xf",
             "154, GPU recovery action changed from 0x0 (None) to 0x1 (", "\x00", "\ufffd", "9" * 30]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=60))
def test_any_text_parses_and_grades_without_a_traceback(parts):
    text = "".join(parts)
    for data in (text, text.encode("utf-8", "surrogatepass")):
        events = kernlog.parse(data)
        for v in kernlog.grade_all(events):
            assert v.status in ("ok", "warn", "fail")


def test_a_huge_line_is_cut_not_regexed_whole():
    text = "[ 1.0] NVRM: " + "GPU 0000:3b:00.0 " * 200000 + "\n"
    (e,) = kernlog.parse(text + "[ 2.0] " + XID79 + "\n")[-1:]
    assert e.code == 79
