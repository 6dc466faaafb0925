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

LOCAL = Path(__file__).resolve().parent.parent / "fixtures" / "local" / "slurm-25.11"
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
