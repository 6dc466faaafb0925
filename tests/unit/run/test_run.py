"""slurmkit run: the pure decisions, the IMDSv2 client against a loopback server playing IMDS, and the wrapper
outside Slurm (signals, exit codes, spot notice). Requeueing on the real cluster: tests/integration/test_run_requeue.py.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slurmkit import config
from slurmkit.errors import UsageError
from slurmkit.run import (Imds, ImdsError, classify, dist_env, parse_duration, parse_instance_action,
                          requeue_decision)


def test_parse_duration():
    assert parse_duration("00:01:00") == 60
    assert parse_duration("1-02:03:04") == 86400 + 7384
    assert parse_duration("05:30") == 330
    assert parse_duration("UNLIMITED") is None and parse_duration("") is None and parse_duration("x:y") is None


def test_classify_timeout_vs_preemption_as_submitit():
    # 1-minute job: min(48, 60-600) < 0, so any signal is a timeout
    assert classify(9, 60) == "timeout"
    # 10-hour job: guaranteed = min(8h, 9h50m) = 8h
    assert classify(3600, 36000) == "preemption"
    assert classify(8 * 3600 + 1, 36000) == "timeout"
    assert classify(100, None) == "preemption"         # no time limit: it can only be a preemption
    assert classify(None, 3600) == "unknown"


def test_requeue_decision():
    kw = dict(job_id="12", restarts=0, max_requeues=2, requeue_on=["timeout", "preemption", "spot"], leader=True)
    assert requeue_decision("timeout", **kw).requeue
    assert requeue_decision("spot", **kw).requeue
    assert requeue_decision("unknown", **kw).requeue            # counted as a preemption
    assert not requeue_decision("timeout", **{**kw, "restarts": 2}).requeue
    assert "limit" in requeue_decision("timeout", **{**kw, "restarts": 2}).why
    assert not requeue_decision("timeout", **{**kw, "leader": False}).requeue
    assert not requeue_decision("timeout", **{**kw, "job_id": None}).requeue
    assert not requeue_decision("timeout", **kw, cancelled=True).requeue
    assert not requeue_decision("timeout", **{**kw, "requeue_on": ["preemption"]}).requeue


def test_dist_env_batch_step_and_task():
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[007-008,010]", "SLURM_NTASKS": "24",
           "SLURM_PROCID": "0"}
    assert dist_env(env) == {"MASTER_ADDR": "gpu007", "MASTER_PORT": str(20000 + 4242), "WORLD_SIZE": "24"}
    task = dict(env, SLURM_STEP_ID="0", SLURM_PROCID="9", SLURM_LOCALID="1", SLURM_NODEID="1")
    d = dist_env(task, master_port=29500)
    assert d["RANK"] == "9" and d["LOCAL_RANK"] == "1" and d["NODE_RANK"] == "1" and d["MASTER_PORT"] == "29500"
    assert "MASTER_ADDR" not in dist_env(dict(env, MASTER_ADDR="ib0-host"))          # the user's value wins
    assert dist_env({"SLURM_NNODES": "2", "SLURM_NODELIST": "n1"})["WORLD_SIZE"] == "2"


def test_parse_instance_action():
    n = parse_instance_action('{"action": "terminate", "time": "2017-09-18T08:22:00Z"}')
    assert n["action"] == "terminate" and n["epoch"] == 1505722920
    assert parse_instance_action("garbage") == {"action": "unknown", "time": "", "epoch": None}


def test_run_config_section_and_errors(tmp_path):
    s = config.loads("run:\n  grace: 20\n  checkpoint_signal: none\n  requeue_on: [preemption, spot]\n")
    assert s.run.grace == 20 and s.run.checkpoint_signal == "none" and s.run.requeue_on == ["preemption", "spot"]
    assert config.loads("").run.signal == "USR2"
    with pytest.raises(UsageError) as e:
        config.loads("run:\n  signal: USR9\n", "c.yaml")
    assert str(e.value).startswith("c.yaml:2: ") and "USR9" in str(e.value)
    with pytest.raises(UsageError) as e:
        config.loads("run:\n  signal: TERM\n", "c.yaml")
    assert "cannot be the trigger" in str(e.value)
    with pytest.raises(UsageError) as e:
        config.loads("run:\n  requeue_on: [timeout, crash]\n", "c.yaml")
    assert "c.yaml:2" in str(e.value)


# --- a loopback server that plays AWS IMDSv2 ---------------------------------------------------------------------

class ImdsState:
    def __init__(self):
        self.notice = None
        self.tokens = []          # tokens handed out
        self.valid = set()
        self.gets = []            # (path, token header)


class ImdsHandler(BaseHTTPRequestHandler):
    state: ImdsState = None

    def log_message(self, *a):
        pass

    def _send(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        st = self.state
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(400)
        tok = f"token-{len(st.tokens) + 1}"
        st.tokens.append(tok)
        st.valid.add(tok)
        self._send(200, tok.encode())

    def do_GET(self):
        st = self.state
        tok = self.headers.get("X-aws-ec2-metadata-token")
        st.gets.append((self.path, tok))
        if tok not in st.valid:                       # IMDSv2 only: no token, no answer
            return self._send(401)
        if self.path == "/latest/meta-data/spot/instance-action" and st.notice:
            return self._send(200, json.dumps(st.notice).encode())
        self._send(404, b"<html>404 - Not Found</html>")


@pytest.fixture
def imds():
    state = ImdsState()
    handler = type("H", (ImdsHandler,), {"state": state})
    srv = None
    for port in range(7390, 7400):                    # this helper's loopback ports
        try:
            srv = ThreadingHTTPServer(("127.0.0.1", port), handler)
            break
        except OSError:
            continue
    if srv is None:
        pytest.skip("no free loopback port in 7390-7399")
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    state.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield state
    srv.shutdown()
    srv.server_close()


def test_imds_token_then_404_means_no_notice(imds):
    c = Imds(imds.url, timeout=2)
    assert c.instance_action() is None
    assert c.instance_action() is None
    assert imds.tokens == ["token-1"]                 # one PUT, the token reused
    assert imds.gets == [("/latest/meta-data/spot/instance-action", "token-1")] * 2


def test_imds_notice_and_token_refresh_on_401(imds):
    c = Imds(imds.url, timeout=2)
    assert c.instance_action() is None
    imds.valid.clear()                                # the token expired server-side
    imds.notice = {"action": "stop", "time": "2026-11-30T10:00:00Z"}
    n = c.instance_action()
    assert n["action"] == "stop" and n["time"] == "2026-11-30T10:00:00Z"
    assert imds.tokens == ["token-1", "token-2"]


def test_imds_unreachable_is_an_error_not_a_hang():
    c = Imds("http://127.0.0.1:9", timeout=1)         # discard port: nothing listens
    start = time.monotonic()
    with pytest.raises(ImdsError):
        c.instance_action()
    assert time.monotonic() - start < 5


# --- the wrapper outside Slurm -----------------------------------------------------------------------------------

CHILD = r"""
import sys, time
from slurmkit import checkpoint
print("child ready", flush=True)
for i in range(600):
    if checkpoint.stop_requested():
        print("child stopped", flush=True)
        sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    time.sleep(0.05)
print("child timeout", flush=True)
sys.exit(9)
"""


def wrapper(*args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMKIT_STOP"))}
    e.pop("SLURMKIT_CONFIG", None)
    e.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "slurmkit.cli", "--config", os.devnull, "run", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)


def test_exit_code_passes_through():
    p = wrapper("--", sys.executable, "-c", "import sys; sys.exit(7)")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 7 and "event=child-exit code=7" in err
    p = wrapper("--", "/nonexistent/cmd")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 127


def test_usr2_asks_the_child_and_outside_slurm_never_requeues():
    p = wrapper("--grace", "10", "--", sys.executable, "-c", CHILD, "5")
    assert p.stdout.readline().strip() == "child ready"
    p.send_signal(signal.SIGUSR2)
    out, err = p.communicate(timeout=30)
    assert "child stopped" in out and p.returncode == 5
    assert "event=signal signal=SIGUSR2" in err
    assert "event=checkpoint-asked kind=preemption signal=SIGTERM" in err
    assert "no requeue: not a Slurm job" in err and "event=requeued" not in err


def test_file_flag_only_and_forwarded_signals():
    p = wrapper("--checkpoint-signal", "none", "--", sys.executable, "-c", CHILD)
    assert p.stdout.readline().strip() == "child ready"
    p.send_signal(signal.SIGUSR2)
    out, err = p.communicate(timeout=30)
    assert "child stopped" in out and p.returncode == 0 and "signal=none" in err
    # a TERM from outside (scancel) is forwarded; a child without a handler dies of it: 128+15
    p = wrapper("--", "sleep", "30")
    assert "event=start" in p.stderr.readline()       # the wrapper's handlers are in place
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 143 and "event=signal signal=SIGTERM action=" in err


def test_a_flood_of_signals_never_hangs_the_wrapper():
    """The wrapper's signal handler runs in its main thread, between two steps of whatever that thread was doing.
    It took a lock the loop also takes: a handler run while the loop held it would wait for itself for good, and
    under a flood of signals the handler ran inside itself until the wrapper died of RecursionError (exit 1,
    every time, before the handler became one append). Signals come here as fast as one process can send them
    while a short child runs: the wrapper must still see the child end, say so and exit with its code."""
    p = wrapper("--", "sleep", "2")
    assert "event=start" in p.stderr.readline()       # the wrapper's handlers are in place
    sent = 0
    deadline = time.monotonic() + 20
    while p.poll() is None and time.monotonic() < deadline:
        for _ in range(200):
            try:
                os.kill(p.pid, signal.SIGCHLD)
                sent += 1
            except ProcessLookupError:
                break
    if p.poll() is None:
        p.kill()
        p.communicate()
        pytest.fail(f"the wrapper hung: still running 20 s into a 2 s child, {sent} signals sent")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "event=child-exit code=0" in err, err


def test_spot_notice_asks_the_child(imds):
    p = wrapper("--imds-endpoint", imds.url, "--imds-poll", "0.2", "--", sys.executable, "-c", CHILD)
    assert p.stdout.readline().strip() == "child ready"
    time.sleep(0.6)
    assert p.poll() is None                           # 404s: no notice, keeps running
    imds.notice = {"action": "terminate", "time": "2099-01-01T00:00:00Z"}
    out, err = p.communicate(timeout=30)
    assert "child stopped" in out and p.returncode == 0
    assert "event=spot-notice action=terminate time=2099-01-01T00:00:00Z" in err
    assert "event=checkpoint-asked kind=spot" in err
    assert imds.tokens == ["token-1"] and len(imds.gets) >= 2


def test_bad_signal_is_exit_2():
    p = wrapper("--signal", "USR9", "--", "true")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 2 and "unknown signal 'USR9'" in err and "Traceback" not in err
    p = wrapper("--signal", "TERM", "--", "true")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 2 and "cannot be the trigger" in err


def test_restart_delay_is_zero_or_at_least_two_seconds():
    """Issue 29: StartTime=now+1 would race slurmd's revocation of the old run's credential (by the second)."""
    from slurmkit.settings.ops import RunSettings

    assert RunSettings(restart_delay=0).restart_delay == 0
    assert RunSettings().restart_delay == 5
    with pytest.raises(ValueError, match="restart_delay"):
        RunSettings(restart_delay=1)
