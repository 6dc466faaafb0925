"""The pyslurm backend over pyslurm objects recorded from a real run (pyslurm 25.11.2 on a source build of Slurm
25.11.7: tests/fixtures/local/slurm-25.11/pyslurm-*.json, recorded by the comparison script of issue 12), and
its choice and errors."""
import json
import sys
import types
from pathlib import Path

import pytest

from slurmkit.slurm import get_backend, pyslurm_backend as P
from slurmkit.slurm.cli_backend import SlurmError
from slurmkit.slurm.records import parse_scontrol_nodes_oneliner

pytestmark = pytest.mark.usefixtures("utc_local_time")

LOCAL = Path(__file__).resolve().parents[2] / "fixtures" / "local" / "slurm-25.11"
RECORDED = LOCAL / "pyslurm-25.11.2-nodes-and-job-layouts-gpu-job.json"
SCONTROL = LOCAL / "pyslurm-compare-scontrol-o-d-show-node-gpu-job.txt"




def recorded():
    data = json.loads(RECORDED.read_text())
    nodes = {name: types.SimpleNamespace(**attrs) for name, attrs in data["nodes"].items()}
    return data, nodes


def test_recorded_objects_match_the_scontrol_path_of_the_same_moment():
    data, nodes = recorded()
    used = P.gres_used_by_node(data["running_job_layouts"])
    got = {name: P.node_record(name, n, used.get(name)) for name, n in nodes.items()}
    want = {r.name: r for r in parse_scontrol_nodes_oneliner(SCONTROL.read_text())}
    assert sorted(got) == sorted(want) == ["n1", "n2", "n3", "n4"]
    for name in want:
        for f in ("state", "flags", "reason", "reason_user", "reason_time", "gpus_total", "gpus_used",
                  "partitions", "cpus", "cpus_alloc"):
            assert getattr(got[name], f) == getattr(want[name], f), (name, f)
    assert (got["n1"].state_text, got["n1"].gpus_used, got["n1"].gres_used) == ("MIXED", 2, "gpu:2")
    assert got["n2"].reason.startswith("slurmkit:xid79") and got["n2"].reason_time is not None


def test_what_pyslurm_itself_says_and_slurmkit_does_not_repeat():
    """The recorded objects show the issue's findings: no [user@time] suffix, reason_time an epoch int,
    reason_user 'root' on nodes with no reason, allocated_gres empty on the node running a 2-GPU job."""
    data, nodes = recorded()
    assert isinstance(nodes["n2"].reason_time, int) and "[" not in nodes["n2"].reason
    assert nodes["n3"].reason in (None, "") and nodes["n3"].reason_user == "root"
    assert not nodes["n1"].allocated_gres and "gres/gpu" not in json.dumps(nodes["n1"].allocated_tres)
    r3 = P.node_record("n3", nodes["n3"], None)
    assert (r3.reason, r3.reason_user, r3.reason_time) == ("", None, None)


def test_layouts_sum_per_node():
    layouts = [{"n1": {"gres": {"gpu": {"count": 2, "indexes": "0-1"}}, "cpu_ids": "0", "memory": 1000}},
               {"n1": {"gres": {"gpu": {"count": 1, "indexes": "2"}}},
                "n2": {"gres": {"gpu:a100": {"count": 4}, "nic": 1}}}, {}, None,
               {"n3": {"gres": {"gpu": {"count": "x"}}}}, {"n4": "bad"}]   # synthetic, pyslurm 25.11's shape
    assert P.gres_used_by_node(layouts) == {"n1": {"gpu": 3}, "n2": {"gpu:a100": 4, "nic": 1}}


def _fake_pyslurm(monkeypatch, *, version="25.11.2", nodes=None, error=None):
    """A stand-in module for pyslurm's import (the real one needs a libslurm of its version)."""
    mod = types.ModuleType("pyslurm")
    mod.__version__ = version

    class RPCError(Exception):   # the name and message pyslurm.core.error.RPCError gives
        pass

    def load():
        if error:
            raise RPCError(error)
        return nodes or {}

    mod.Nodes = types.SimpleNamespace(load=load)
    mod.Jobs = types.SimpleNamespace(load=lambda: {})
    monkeypatch.setitem(sys.modules, "pyslurm", mod)
    monkeypatch.setattr(P.importlib.util, "find_spec", lambda name: object())
    return mod


class _Cli:
    name = "cli"

    def __init__(self, version="25.11.7"):
        self._v = version

    def version(self):
        return self._v


def test_unreachable_controller_is_a_slurm_error(monkeypatch):
    _fake_pyslurm(monkeypatch, error="Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmError) as e:
        P.PyslurmBackend(_Cli()).nodes()
    assert "Unable to contact slurm controller" in str(e.value) and "slurmctld" in str(e.value)


def test_no_nodes_is_an_error(monkeypatch):
    _fake_pyslurm(monkeypatch, nodes={})
    with pytest.raises(SlurmError, match="no nodes"):
        P.PyslurmBackend(_Cli()).nodes()


def test_chosen_only_when_versions_match(monkeypatch):
    _fake_pyslurm(monkeypatch)
    assert P.usable(_Cli("25.11.7")) == (True, "pyslurm 25.11.2 matches Slurm 25.11.7")
    assert P.usable(_Cli("24.11.5")) == (False, "pyslurm 25.11 does not match Slurm 24.11")


def _settings(backend):
    return types.SimpleNamespace(slurm=types.SimpleNamespace(backend=backend, timeout=5, bin_dir=None))


def test_verbose_says_which_backend_and_why(monkeypatch):
    said = []
    monkeypatch.setattr(P, "usable", lambda cli: (False, "pyslurm is not installed"))
    assert get_backend(_settings("auto"), verbose=said.append).name == "cli"
    assert get_backend(_settings("cli"), verbose=said.append).name == "cli"
    monkeypatch.setattr(P, "usable", lambda cli: (True, "pyslurm 25.11.2 matches Slurm 25.11.7"))
    assert get_backend(_settings("auto"), verbose=said.append).name == "pyslurm"
    assert said == ["using the Slurm CLI backend: pyslurm is not installed",
                    "using the Slurm CLI backend: slurm.backend is 'cli'",
                    "using the pyslurm backend: pyslurm 25.11.2 matches Slurm 25.11.7"]


# --- issue 35: Slurm's words, read exactly -----------------------------------------------------------------------

BOB = "moved to rack 4 [bob@2026-01-01T00:00:00]"   # an admin's reason that itself ends in [user@time]


def test_a_reason_ending_in_user_at_time_is_whole_and_both_backends_agree_field_by_field():
    """Issue 35.1. Synthetic, from the recordings: the recorded n4 object with its reason text replaced by BOB (pyslurm
    gives the reason as Slurm keeps it, with no suffix), and the recorded scontrol line of n4 with BOB before Slurm's
    own `[root@2026-12-01T10:06:00]` (what scontrol prints for that reason: checked on the dev cluster by
    tests/integration/test_slurm_words.py)."""
    from datetime import datetime, timezone

    from slurmkit import audit as A

    data, nodes = recorded()
    n4 = types.SimpleNamespace(**{**vars(nodes["n4"]), "reason": BOB})
    got = P.node_record("n4", n4, None)
    line = next(x for x in SCONTROL.read_text().splitlines() if x.startswith("NodeName=n4 "))
    line = line.replace("Reason=admin: PSU swap ticket 4411 [", f"Reason={BOB} [")
    (want,) = parse_scontrol_nodes_oneliner(line)
    assert (got.reason, got.reason_user, got.reason_time) == (BOB, "root", "2026-12-01T10:06:00")
    for f in ("name", "state", "flags", "reason", "reason_user", "reason_time", "gres", "gres_used", "gpus_total",
              "gpus_used", "partitions", "cpus", "cpus_alloc"):
        assert getattr(got, f) == getattr(want, f), f
    # what audit makes of it: an hour old, 8 GPU-hours, by an admin (not 11 months and 16,091 GPU-hours)
    now = datetime(2026, 12, 1, 11, 6, tzinfo=timezone.utc)
    table = A.load_causes()
    for rec in (got, want):
        (e,) = A.audit([rec], table=table, prefix="slurmkit:", now=now)
        assert (e.by, e.age_seconds, e.node.reason) == ("admin", 3600, BOB)
        assert A.summarize([e])["gpu_hours_lost"] == 8.0


def test_version_text_keeps_slurms_two_digit_minor():
    """Issue 35.5: 22.05, not 22.5."""
    assert P._major_minor("22.05.8") == "22.05" and P._major_minor("25.11.2") == "25.11"


def test_a_version_mismatch_names_22_05(monkeypatch):
    _fake_pyslurm(monkeypatch)
    assert P.usable(_Cli("22.05.8")) == (False, "pyslurm 25.11 does not match Slurm 22.05")


def test_could_not_ask_is_exit_3_not_1(monkeypatch):
    """Issue 35.2: slurmctld unreachable through pyslurm is 'could not find out' (3), not 'out of service' (1)."""
    _fake_pyslurm(monkeypatch, error="Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmError) as e:
        P.PyslurmBackend(_Cli()).nodes()
    assert e.value.exit_code == 3
    _fake_pyslurm(monkeypatch, nodes={})
    with pytest.raises(SlurmError) as e:
        P.PyslurmBackend(_Cli()).nodes()
    assert e.value.exit_code == 3
