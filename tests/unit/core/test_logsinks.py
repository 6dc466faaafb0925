"""The site's pipelines: the Prometheus textfile (parsed here with prometheus-client's own parser) and journald's
native protocol (sent over a real Unix datagram socket; journald itself does not run on the test machines)."""
import os
import socket
import struct

import pytest

from slurmkit import config, healthlog, logsinks

prom_parser = pytest.importorskip("prometheus_client.parser")


def rec(check, status, t="2026-11-30T10:00:00Z", **kw):
    return dict({"time": t, "node": "gpu-001", "context": "prolog", "job_id": 7, "check": check,
                 "status": status, "reason": "", "evidence": {}, "action": "none"}, **kw)


def metrics(path):
    with open(path) as f:
        text = f.read()
    out = {}
    for fam in prom_parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_textfile_parses_and_says_what_the_node_last_saw(tmp_path):
    tf, state = str(tmp_path / "textfile"), str(tmp_path / "state")
    logsinks.to_textfile(tf, [rec("xid", "ok"), rec("ecc", "ok")], state_dir=state)
    path = logsinks.to_textfile(tf, [rec("xid", "fail", t="2026-11-30T10:05:00Z", action="drained", code="xid79",
                                         reason='GPU 0000:3b:00 fell off the "bus"\nnext')], state_dir=state)
    assert os.path.basename(path) == "slurmkit-gpu-001.prom"
    m = metrics(path)
    assert m[("slurmkit_check_status", (("check", "xid"),))] == 2
    assert m[("slurmkit_check_status", (("check", "ecc"),))] == 0
    assert m[("slurmkit_drained", (("cause", "xid79"),))] == 1
    assert m[("slurmkit_records_total", (("check", "xid"), ("status", "ok")))] == 1
    assert m[("slurmkit_check_timestamp_seconds", (("check", "xid"),))] == 1796033100
    assert [f for f in os.listdir(tf)] == ["slurmkit-gpu-001.prom"]          # no temporary file left behind
    logsinks.to_textfile(tf, [rec("audit", "ok", action="resumed")], state_dir=state)
    assert not [k for k in metrics(path) if k[0] == "slurmkit_drained"]


def test_label_values_with_quotes_backslashes_and_newlines_round_trip(tmp_path):
    name = 'we"ird\\check\nname'
    path = logsinks.to_textfile(str(tmp_path / "t"), [rec(name, "warn")], state_dir=str(tmp_path / "s"))
    assert metrics(path)[("slurmkit_check_status", (("check", name),))] == 1


def test_journal_fields_reach_a_datagram_socket_in_the_native_protocol(tmp_path):
    sock_path = str(tmp_path / "journal.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(sock_path)
    try:
        assert logsinks.to_journal([rec("xid", "fail", reason="two\nlines", action="drained")], sock_path)
        data = server.recv(65536)
    finally:
        server.close()
    fields, rest = {}, data
    while rest:
        line, _, after = rest.partition(b"\n")
        if b"=" in line:
            k, _, v = line.partition(b"=")
            fields[k.decode()] = v.decode()
            rest = after
        else:                                    # KEY\n<le64 length><value>\n
            (n,) = struct.unpack("<Q", after[:8])
            fields[line.decode()] = after[8:8 + n].decode()
            rest = after[8 + n + 1:]
    assert fields["SLURMKIT_CHECK"] == "xid" and fields["SLURMKIT_STATUS"] == "fail"
    assert fields["SLURMKIT_REASON"] == "two\nlines" and fields["PRIORITY"] == "3"
    assert fields["SLURMKIT_NODE"] == "gpu-001" and fields["SLURMKIT_JOB_ID"] == "7"
    assert fields["SYSLOG_IDENTIFIER"] == "slurmkit"


def test_no_journald_means_false_not_an_error(tmp_path):
    assert logsinks.to_journal([rec("xid", "ok")], str(tmp_path / "absent")) is False


@pytest.mark.skipif(not os.path.exists(logsinks.JOURNAL_SOCKET), reason="journald does not run on this machine")
def test_records_reach_journald():
    assert logsinks.to_journal([rec("xid", "ok")])


def test_write_feeds_the_log_first_then_the_sinks(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"paths:\n  health_log: {tmp_path}/log/\n  state_dir: {tmp_path}/state\n"
                   f"health:\n  textfile_dir: {tmp_path}/tf\n  log_max_bytes: 4096\n  log_generations: 2\n")
    s = config.load(str(cfg))
    for i in range(100):
        healthlog.write(s, rec("xid", "ok", seq=i))
    assert sorted(os.listdir(tmp_path / "log")) == [".gpu-001.lock", "gpu-001.jsonl", "gpu-001.jsonl.1",
                                                     "gpu-001.jsonl.2"]
    assert metrics(tmp_path / "tf" / "slurmkit-gpu-001.prom")[
        ("slurmkit_records_total", (("check", "xid"), ("status", "ok")))] == 100


def test_bad_rotation_settings_are_refused_with_the_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("health:\n  log_max_bytes: 10\n")
    with pytest.raises(Exception) as e:
        config.load(str(cfg))
    assert "log_max_bytes" in str(e.value) and "c.yaml" in str(e.value)


def test_an_alert_reaches_stderr_slurmds_log_and_syslog(tmp_path, monkeypatch, capsys):
    """logsinks.alert (issue 28.3/28.7): one line, three places; a missing slurmd log is never created."""
    sock_path = str(tmp_path / "syslog.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(sock_path)
    monkeypatch.setenv("SLURMKIT_SYSLOG_SOCKET", sock_path)
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    log = tmp_path / "slurmd-n7.log"
    log.write_text("[2026-12-02T00:00:00.000] started\n")
    conf = {b"slurmdlogfile": str(tmp_path / "slurmd-%n.log").encode()}
    try:
        line = logsinks.alert("prolog: the  health log\nis gone", conf=conf)
        got = server.recv(65536).decode()
    finally:
        server.close()
    assert line == "slurmkit prolog: the health log is gone"
    assert capsys.readouterr().err == line + "\n"
    assert log.read_text().splitlines()[-1].endswith("] error: " + line)
    assert got.startswith("<27>") and got.endswith(f"]: {line}")
    (tmp_path / "slurmd-n7.log").unlink()
    logsinks.alert("again", conf=conf)                       # no log file, no socket listening: no error
    assert not (tmp_path / "slurmd-n7.log").exists()


def test_slurmd_log_file_fills_in_node_and_host():
    assert logsinks.slurmd_log_file({b"slurmdlogfile": b"/var/log/slurmd.%n.log"}, "gpu7") == "/var/log/slurmd.gpu7.log"
    assert logsinks.slurmd_log_file({}, "gpu7") is None
    host = os.uname().nodename.split(".")[0]
    assert logsinks.slurmd_log_file({b"slurmdlogfile": b"/l/%h.log"}, None) == f"/l/{host}.log"
