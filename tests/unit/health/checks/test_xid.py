"""The xid check on every real kernel-log capture in tests/fixtures/xid, each verdict written out."""
import json
from pathlib import Path

import pytest

from slurmkit.health import kernlog
from slurmkit.health.runner import run_checks

from sitesettings import make_settings

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "xid"

# file -> (status, drain code, GPU/NVSwitch bus in the reason, what was seen: Xid/SXid codes and signature ids)
EXPECTED = {
    "akash-provider-xid79-dmesg-T-multiline-aligned.txt": ("fail", "xid79", "0000:a1:00", {79, "offbus"}),
    "gpu-01-xid13-13-43-journalctl-k-no-timestamp-truncated-comm.txt": ("warn", "", "0000:01:00", {13, 43}),
    "gpu-pci07-xid38-109-journalctl-polish-locale.txt": ("fail", "xid109", "0000:07:00", {38, 109}),
    "gpud-dmesg-ctime-xid13-xid109-peermem.txt": ("fail", "xid109", "0000:cb:00", {13, 109}),
    "gpud-dmesg-ctime-xid31-mmu-fault-xid109.txt": ("fail", "xid109", "0000:cb:00", {31, 109}),
    "gpud-hgx-dmesg-xid79-plus-sxid20034-nvswitch.txt": ("fail", "xid79", "0000:91:00", {79, 20034, "offbus"}),
    "gpud-pr117-dmesg-T-xid45-then-hung-task-D-state.txt": ("warn", "", "0000:61:00", {45}),
    "gpud-xe9680-h100-dmesg-T-xid119-gsp-timeout.txt": ("fail", "xid119", "0000:9b:00", {119}),
    "h100-dmesg-xid48-63-94-dbe-contained.txt": ("fail", "xid48", "0000:52:00", {48, 63, 94}),
    "h100-hgx-fallen-off-bus-probe-failed-dmesg-multiline.txt": ("fail", "xid79", "0000:5d:00",
                                                                 {"offbus", "probe_failed"}),
    "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt": ("fail", "xid79", "0000:5d:00", {79, "offbus"}),
    "laptop-dmesg-xid32-xid31-bumblebee-677.txt": ("warn", "", "0000:01:00", {31, 32}),
    "ml-eng-xid63-row-remapper.txt": ("fail", "xid63", "0000:10:1c", {63}),
    "rtx2060-xid109-dmesg.txt": ("fail", "xid109", "0000:26:00", {109}),
    "rtx4080-xid109-ctx-switch-timeout-dmesg.txt": ("fail", "xid109", "0000:0b:00", {109}),
    "rtx4090-xid79-journal-chinese-locale-plus-dmesg.txt": ("fail", "xid79", "0000:c2:00", {79, "offbus"}),
    "rtx5090-xid109-channel-hex-format-no-timestamp.txt": ("fail", "xid109", "0000:01:00", {109}),
    # --- third collection: GPU failures without an Xid line, benign NVRM noise, AER, injected lines
    "gpud-fault-injector-dmesg-decode-iso-syslog-level-prefix-injected-xid79-gpud-870.txt":
        ("warn", "", "0000:04:00", {79}),              # written to /dev/kmsg by a program: warn, not drain
    "laptop-dmesg-benign-nvrm-open-module-load-chipset-setup-error-ogkm-489.txt": ("ok", "", None, set()),
    "laptop-dmesg-rminitadapter-failed-inconsistent-ts-padding-system76-528.txt":
        ("fail", "xid_rminit", "0000:01:00", {"init_failed"}),
    "laptop-kern-log-old-xid-no-pci-prefix-no-timestamp-xid16-xid8-bumblebee-329.txt":
        ("warn", "", "0000:01:00", {16, 8}),
    "old-driver-dmesg-rminitadapter-failed-bearing-minor-number-duplicated-bumblebee-722.txt":
        ("fail", "xid_rminit", "minor 0", {"init_failed"}),
    "rtx3090-dmesg-rminitadapter-gsp-init-failed-gfw-boot-ogkm-789.txt":
        ("fail", "xid_rminit", "0000:98:00", {"init_failed", "gsp_boot"}),
    "rtx4070-journal-xid119-gsp-init-done-timeout-1149s-banner-before-xid-ogkm-659.txt":
        ("fail", "xid119", "0000:01:00", {119}),
    "rtx5080-journal-rm-init-adapter-osinitnvmapping-cannot-attach-gpu-ogkm-1151.txt":
        ("fail", "xid_rminit", "0000:09:00", {"init_failed", "cannot_attach"}),
    "rtx5080-laptop-dmesg-H-relative-ts-gsp-fmc-boot-failed-rminitadapter-ogkm-935.txt":
        ("fail", "xid_gsp", "not named in the log", {"gsp_boot"}),
    "tesla-dmesg-aer-uncorrected-fatal-surprise-down-no-aer-aware-driver-xid79-gpu-burn-1.txt":
        ("fail", "xid79", "0000:02:00", {79, "aer"}),
    "vmware-vm-journalctl-rminitadapter-failed-then-kernel-oops-cuda-samples-104.txt":
        ("fail", "xid_rminit", "0000:13:00", {"init_failed"}),
    "x870e-desktop-journal-short-precise-xid79-plus-codeless-fallen-off-bus-line-excerpt1-servedeck.txt":
        ("fail", "xid79", "0000:01:00", {79, "offbus"}),
}
TODO_WORDS = ("reboot", "reset", "restart", "replace")


def seen(r):
    return {e.get("signature") or e["code"] for e in r.evidence["events"]}


def judge(text, **cfg):
    s = make_settings()
    for k, v in cfg.items():
        setattr(s.xid, k, v)
    (r,) = run_checks(s, "full", captures={"xid": text}).results
    return r


NOT_KERNEL_LOGS = ["akash-provider-nvidia-smi-device-handle-unknown-error.txt"]   # nvidia-smi output (gpu_count's)


def test_every_xid_fixture_has_an_expected_verdict():
    assert sorted(p.name for p in FIX.iterdir()) == sorted(list(EXPECTED) + NOT_KERNEL_LOGS)


@pytest.mark.parametrize("text", ["", "\n\n", "\x00\xff garbage \x1b[31m", *[(FIX / n).read_text() for n in NOT_KERNEL_LOGS]])
def test_a_capture_that_is_not_a_kernel_log_is_unreadable_not_ok(text):
    from slurmkit.errors import UsageError
    with pytest.raises(UsageError, match="no kernel-log lines"):
        judge(text)


def test_a_kernel_log_without_gpu_events_is_ok():
    text = "[    0.000000] Linux version 6.1.0-18-amd64\n[    1.2] EXT4-fs (nvme0n1p2): mounted filesystem\n"
    assert judge(text).status == "ok"
    assert judge("Jun  7 19:32:16 gpu7 kernel: Linux version 6.1.0\n").status == "ok"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_xid_fixture_verdict(name):
    status, code, pci, codes = EXPECTED[name]
    text = (FIX / name).read_text()
    r = judge(text)
    assert r.status == status, r.reason
    assert r.code == code
    if pci:
        assert pci in r.reason
    assert seen(r) == codes
    if status == "fail":
        assert r.evidence["line"] in text          # the evidence is the log line, verbatim
    if status != "ok":
        assert any(w in r.reason for w in TODO_WORDS), r.reason     # and says what to do


def test_timestamps_in_every_format():
    got = {n: [e.time for e in kernlog.parse((FIX / n).read_text())][0] for n in (
        "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt", "akash-provider-xid79-dmesg-T-multiline-aligned.txt",
        "gpu-pci07-xid38-109-journalctl-polish-locale.txt", "rtx5090-xid109-channel-hex-format-no-timestamp.txt",
        "rtx4090-xid79-journal-chinese-locale-plus-dmesg.txt")}
    assert got["h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt"] == "4254.197860"
    assert got["akash-provider-xid79-dmesg-T-multiline-aligned.txt"] == "Fri Apr  5 21:29:39 2024"
    assert got["gpu-pci07-xid38-109-journalctl-polish-locale.txt"] == "kwi 15 07:56:59"
    assert got["rtx5090-xid109-channel-hex-format-no-timestamp.txt"] is None
    assert got["rtx4090-xid79-journal-chinese-locale-plus-dmesg.txt"] == "6月 28 02:52:53"


def test_rfc3339_and_syslog_prefixes():
    # SYNTHETIC: the real Xid 79 body with syslog and RFC3339 prefixes (no capture of those formats with an Xid)
    body = "NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    for prefix, t in (("2024-04-05T21:29:39.123456+00:00 node7 kernel: ", "2024-04-05T21:29:39.123456+00:00"),
                      ("Apr  5 21:29:39 node7 kernel: ", "Apr  5 21:29:39")):
        (e,) = kernlog.parse(prefix + body)
        assert (e.code, e.pci, e.time) == (79, "0000:01:00", t)


# --- dead checks from other projects (DESIGN.md): each must fire here --------------------------------------

def test_regression_xid_regex_does_not_read_bus_number_or_pid():
    # a loose `Xid.*?(\d+)` reads "0000" (the PCI domain) or the pid; an Xid 13 with pid 79 on bus 0000:79:00
    # must stay an application warning, and the Xid 79 right after must fail
    line13 = "[  100.000001] NVRM: Xid (PCI:0000:79:00): 13, pid=79, name=python, Graphics Exception"
    r = judge(line13)
    assert (r.status, [e["code"] for e in r.evidence["events"]]) == ("warn", [13])
    r = judge(line13 + "\n[  101.5] NVRM: Xid (PCI:0000:79:00): 79, pid='<unknown>', name=<unknown>, GPU has "
              "fallen off the bus.")
    assert (r.status, r.code) == ("fail", "xid79")


def test_device_plugin_log_line_is_not_a_kernel_xid():
    text = (FIX.parent / "misc" / "rtx-pro-6000-k8s-device-plugin-xid48-unhealthy.txt").read_text()
    assert kernlog.parse(text) == []


# --- the catalog policy (SYNTHETIC message bodies in the real line format) ---------------------------------

def line(code, msg):
    return f"[  200.000000] NVRM: Xid (PCI:0000:3b:00): {code}, pid=1234, name=python, {msg}"


def test_caused_by_previous_xid_follows_that_xid():
    assert judge(line(45, "Ch 00000010, caused by previous Xid 79")).status == "fail"
    assert judge(line(45, "Ch 00000010, caused by previous Xid 13")).status == "warn"
    assert judge(line(45, "Ch 00000010")).status == "warn"


def test_a_process_name_cannot_speak_for_the_driver():
    """Issue 28 item 5: the `name=` field is the process's comm, which any user sets (prctl PR_SET_NAME, 15
    characters); a user-triggerable Xid whose name reads `previous Xid 79` is still the application's fault.
    SYNTHETIC lines in the real format (pid=, name=, then the driver's text)."""
    for code in (13, 31, 43):
        for name in ("previous Xid 79", "a, previous Xid", "x, y, Xid 79, q"):
            r = judge(f"[  200.000000] NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name={name}, Ch 00000010")
            assert (r.status, r.code) == ("warn", ""), (code, name, r.reason)
    # the same Xid 63 text: "pending" in a name is not the driver's pending row remap
    r = judge("[  200.000000] NVRM: Xid (PCI:0000:3b:00): 63, pid=4242, name=reset gpu pending, Row Remapper: "
              "New row marked for remapping")
    assert r.status == "warn", r.reason
    # the driver's own words still count, whatever the name holds (a name with ", " in it too)
    for name in ("python", "<unknown>", "x, y, z, w, v"):
        r = judge(f"[  200.000000] NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name={name}, Ch 00000010, caused by "
                  "previous Xid 79")
        assert (r.status, r.code) == ("fail", "xid45"), (name, r.reason)


def test_xid154_follows_the_recovery_action():
    assert judge(line(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")).status == "fail"
    assert judge(line(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)")).status == "fail"
    assert judge(line(154, "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)")).status == "ok"


def test_application_codes_warn_fatal_codes_fail():
    for code in (13, 31, 38, 43, 45, 68, 94):
        assert judge(line(code, "x")).status == "warn", code
    for code in (46, 48, 62, 64, 74, 79, 95, 109, 119, 120, 136, 144, 150, 158):
        assert judge(line(code, "x")).status == "fail", code


def test_nonfatal_sxid_does_not_fail():
    r = judge("[ 5.0] nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV "
              "error (First)")
    assert r.status == "warn"


def test_site_overrides():
    assert judge(line(13, "x"), fatal_extra=[13]).status == "fail"
    assert judge(line(79, "GPU has fallen off the bus."), ignore=[79]).status == "ok"
    assert judge(line(999, "x")).status == "warn"


def test_catalog_is_data():
    cat = kernlog.catalog()
    assert cat["xid"]["79"]["action"] == "RESTART_BM"
    assert json.loads((Path(kernlog.__file__).parents[2] / "data" / "xid_catalog.json").read_text()) == cat


# --- only new events count ---------------------------------------------------------------------------------

def acted(profile, r):
    """What a hook does after it acted on the verdict (drained the node, or nothing to do): move the mark."""
    if profile in ("prolog", "epilog") and r.commit:
        r.commit()
    return r


def dmesg_from(tmp_path):
    """Settings whose dmesg prints the file it returns (write the kernel log there), with a boot id of their own
    (reboot() gives a new one)."""
    log = tmp_path / "dmesg.txt"
    tool = tmp_path / "dmesg"
    tool.write_text(f"#!/bin/sh\ncat {log}\n")
    tool.chmod(0o755)
    s = make_settings()
    s.tools.dmesg = str(tool)
    s.paths.state_dir = str(tmp_path / "state")
    s.xid.boot_id_file = str(tmp_path / "boot-{node}")
    reboot(tmp_path)
    return s, log


def reboot(tmp_path, node="n9"):
    import uuid
    (tmp_path / f"boot-{node}").write_text(f"{uuid.uuid4()}\n")


def test_an_unacted_fault_stays_new_until_the_hook_commits_its_mark(tmp_path):
    s, log = dmesg_from(tmp_path)
    log.write_text((FIX / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt").read_text())
    first = run_checks(s, "epilog", only=["xid"], node="n9").results[0]
    assert first.status == "fail" and first.commit is not None
    # the drain failed: the hook does not commit, and the next hook and `check` see the fault again
    again = run_checks(s, "prolog", only=["xid"], node="n9").results[0]
    assert (again.status, again.code, again.evidence["new_events"]) == ("fail", "xid79", 2)
    assert run_checks(s, "full", only=["xid"], node="n9").results[0].status == "fail"
    again.commit()                               # drained now: the mark moves, the fault stays for this boot
    r = run_checks(s, "prolog", only=["xid"], node="n9").results[0]
    assert (r.status, r.code, r.evidence["new_events"]) == ("fail", "xid79", 0)


def test_only_events_since_the_last_hook_are_new_but_a_fatal_one_lasts_its_boot(tmp_path, monkeypatch):
    s, log = dmesg_from(tmp_path)
    real = (FIX / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt").read_text()
    log.write_text(real)

    def xid(profile):
        return acted(profile, run_checks(s, profile, only=["xid"], node="n9").results[0])

    assert xid("full").status == "fail"        # `slurmkit check` reads...
    assert xid("full").status == "fail"        # ...without moving the mark
    assert xid("prolog").status == "fail"      # the prolog sees it first and moves the mark
    r = xid("prolog")                          # still this boot: the GPU is still off the bus
    assert (r.status, r.code, r.evidence["new_events"]) == ("fail", "xid79", 0)
    assert r.reason.endswith("(logged earlier this boot)") and "0000:5d:00 fell off the bus" in r.reason
    log.write_text(real + "[ 5000.000001] NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, "
                   "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer\n")
    r = xid("epilog")                          # a new fatal one: its own reason, the old one named too
    assert (r.status, r.code, r.evidence["new_events"]) == ("fail", "xid48", 1)
    assert "(also xid79)" in r.reason
    reboot(tmp_path)                           # a new boot, a new log: an old Xid does not drain forever
    log.write_text("[    1.0] Linux version (new boot, log cleared)\n")
    assert xid("prolog").status == "ok"
    assert xid("prolog").status == "ok"
    log.write_text(real)                       # the same fault again after the log was cleared: new again
    assert xid("prolog").status == "fail"
    assert (tmp_path / "state" / "xid-n9.json").exists()


def test_a_log_file_is_read_from_where_the_last_hook_stopped(tmp_path):
    s = make_settings()
    s.paths.state_dir = str(tmp_path / "state")
    s.xid.boot_id_file = str(tmp_path / "boot-{node}")
    reboot(tmp_path)
    log = tmp_path / "kern.log"
    s.xid.log_file = str(log)
    real = (FIX / "gpu-pci07-xid38-109-journalctl-polish-locale.txt").read_bytes()   # a journal/syslog format

    def xid(profile="prolog"):
        return acted(profile, run_checks(s, profile, only=["xid"], node="n9").results[0])

    log.write_bytes(b"kwi 15 07:50:00 testowy kernel: Linux version 6.8 (boot)\n")
    assert xid().status == "ok"
    with open(log, "ab") as f:
        f.write(real)
    r = xid()
    assert (r.status, r.code, r.evidence["new_events"]) == ("fail", "xid109", 6)   # one 38, five 109
    r = xid()                                           # read from the mark on: nothing new, but this boot's
    assert (r.status, r.code, r.evidence["new_events"]) == ("fail", "xid109", 0)   # Xid 109 is still active
    reboot(tmp_path)
    assert xid().status == "ok"
    mark = json.loads((tmp_path / "state" / "xid-n9.json").read_text())["file"]
    assert mark["offset"] == log.stat().st_size
    with open(log, "ab") as f:                          # a line still being written is not read yet
        f.write(b"kwi 15 08:00:00 testowy kernel: NVRM: Xid (PCI:0000:07:00): 79, pid='<unknown>', name=<unkn")
    assert xid().status == "ok"
    with open(log, "ab") as f:
        f.write(b"own>, GPU has fallen off the bus.\n")
    assert (xid().code) == "xid79"
    log.unlink()                                        # rotated: the new file is read from its start
    log.write_bytes(real)
    assert xid("full").status == "fail" and xid("full").status == "fail"   # `check` reads without moving it


# --- a fatal fault stays active for the rest of its boot (issue 28 item 1) ------------------------------------

def xid_run(s, profile, *, recheck=False):
    """A hook's run (prolog/epilog/health), `slurmkit check` (full), or the recheck `audit resume --recheck` runs
    (`slurmkit check --only xid`: the check named explicitly)."""
    kw = {"only": ["xid"]} if recheck else {"subset": ["xid"]}
    return acted(profile, run_checks(s, profile, node="n9", **kw).results[0])


def test_a_lost_drain_does_not_put_a_broken_gpu_back_in_service(tmp_path):
    """The prolog drained the node for an Xid 79 and moved its mark; slurmctld lost the drain (killed before it
    saved state) and the node came back in service. Every later hook on this boot fails again with the same
    reason, so each re-drains it; a new boot whose log has no fault passes."""
    s, log = dmesg_from(tmp_path)
    log.write_text((FIX / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt").read_text())
    first = xid_run(s, "prolog")
    assert (first.status, first.code) == ("fail", "xid79")
    for profile in ("prolog", "epilog", "health", "prolog"):
        r = xid_run(s, profile)
        assert (r.status, r.code) == ("fail", "xid79"), (profile, r.reason)
        assert r.reason.startswith(first.reason) and r.evidence["line"] == first.evidence["line"]
        assert r.evidence["active_faults"][0]["tag"] == "xid79"
    assert xid_run(s, "full").status == "fail"           # `slurmkit check` says so too
    log.write_text("[ 7000.0] usb 1-1: new high-speed USB device\n")   # the ring buffer no longer shows it
    assert xid_run(s, "prolog").status == "fail"          # still this boot: still broken
    assert xid_run(s, "full").status == "fail"
    reboot(tmp_path)
    assert xid_run(s, "prolog").status == "ok"
    assert xid_run(s, "prolog").status == "ok"


def test_the_admin_recheck_clears_a_fault_only_when_the_whole_log_is_clean(tmp_path):
    """`slurmkit audit resume --recheck` runs `slurmkit check --only xid` on the node: while this boot's log still
    holds the Xid 79 it fails (and clears nothing); after the admin fixed the GPU and cleared the log (dmesg -C) it
    passes over the whole log and ends the fault, so the next prolog passes without a reboot."""
    s, log = dmesg_from(tmp_path)
    real = (FIX / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt").read_text()
    log.write_text(real)
    assert xid_run(s, "prolog").status == "fail"
    r = xid_run(s, "full", recheck=True)
    assert (r.status, r.code) == ("fail", "xid79")
    assert xid_run(s, "prolog").status == "fail"
    # an Xid 13 (the application's) is all the log shows now: a warning, not a fault
    log.write_text("[ 7000.0] NVRM: Xid (PCI:0000:5d:00): 13, pid=4242, name=python, Graphics Exception\n")
    r = xid_run(s, "full", recheck=True)
    assert r.status == "warn" and r.evidence["new_events"] == r.evidence["events_in_log"] == 1
    assert r.evidence["cleared_faults"][0]["tag"] == "xid79" and "cleared 1 fault(s) of this boot" in r.reason
    assert xid_run(s, "prolog").status == "warn"
    assert xid_run(s, "prolog").status == "ok"
    log.write_text("")
    assert xid_run(s, "prolog").status == "ok"


def test_the_site_policy_ends_a_fault_it_no_longer_counts(tmp_path):
    s, log = dmesg_from(tmp_path)
    log.write_text((FIX / "h100-dmesg-xid48-63-94-dbe-contained.txt").read_text())
    assert xid_run(s, "prolog").code == "xid48"
    assert xid_run(s, "prolog").code == "xid48"
    s.xid.ignore = [48]                                   # the site says Xid 48 is not its concern
    r = xid_run(s, "prolog")
    assert (r.status, r.code) == ("fail", "xid63")        # the row remap pending (same first run) still is
    s.xid.ignore = [48, 63]
    assert xid_run(s, "prolog").status == "ok"


def test_an_unreadable_boot_id_cannot_end_a_fault(tmp_path):
    s, log = dmesg_from(tmp_path)
    log.write_text((FIX / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt").read_text())
    assert xid_run(s, "prolog").status == "fail"
    (tmp_path / "boot-n9").unlink()                       # cannot tell whether the node rebooted: fail closed
    log.write_text("[    1.0] Linux version\n")
    assert xid_run(s, "prolog").status == "fail"
    reboot(tmp_path)
    assert xid_run(s, "prolog").status == "ok"


def test_a_recheck_that_cannot_clear_the_fault_fails(tmp_path, monkeypatch):
    from slurmkit.health.checks import xid
    s, log = dmesg_from(tmp_path)
    log.write_text((FIX / "h100-hgx-xid79-fallen-off-bus-dmesg-multiline.txt").read_text())
    assert xid_run(s, "prolog").status == "fail"
    log.write_text("")

    def full_disk(path, state):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(xid, "_save", full_disk)
        r = xid_run(s, "full", recheck=True)
    assert (r.status, r.code) == ("fail", "xid79") and "cannot clear" in r.reason
    assert xid_run(s, "prolog").status == "fail"


def test_a_log_file_fault_lasts_its_boot(tmp_path):
    """xid.log_file: only what was appended is read, so the recheck cannot see the whole boot's log: the fault
    ends with the boot (or the policy)."""
    s, _ = dmesg_from(tmp_path)
    log = tmp_path / "kern.log"
    s.xid.log_file = str(log)
    log.write_bytes((FIX / "gpu-pci07-xid38-109-journalctl-polish-locale.txt").read_bytes())
    assert xid_run(s, "prolog").code == "xid109"
    assert xid_run(s, "prolog").code == "xid109"
    assert xid_run(s, "full", recheck=True).code == "xid109"
    reboot(tmp_path)
    assert xid_run(s, "prolog").status == "ok"


def test_a_previous_xid_of_thousands_of_digits_is_graded_not_a_traceback(tmp_path):
    """Issue 28.10 (synthetic line): `caused by previous Xid <5000 digits>` raised ValueError (int() of more than
    4300 digits). No Xid code has more than 6 digits: the line is graded as an Xid it cannot name (a warning, the
    site's xid.unknown_status), in bounded time."""
    import subprocess
    import sys
    import time

    cap = tmp_path / "dmesg.txt"
    cap.write_text("[   12.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics Exception caused by "
                   f"previous Xid {'9' * 5000}\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "slurmkit", "--config", "/dev/null", "check", "--json",
                        "--capture", f"xid={cap}"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 30 and "Traceback" not in r.stderr, r.stderr
    import json

    (res,) = json.loads(r.stdout)["results"]
    assert res["status"] == "warn" and "previous Xid 999999999999..." in json.dumps(res["evidence"]), res
