"""Property tests: Slurm's readers never raise anything but their own error, on any JSON or text."""
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.slurm.capture import NodeCaptureError, parse_node_capture, parse_scontrol_nodes
from slurmkit.slurm.records import NodeRecord
from slurmkit.slurm.slurm_json import (SlurmFormatError, parse_nodes_json, parse_scontrol_nodes_json,
                                       parse_sinfo_json, parse_squeue_json)

LOCAL = Path(__file__).resolve().parents[2] / "fixtures" / "local"
REAL = [json.loads((LOCAL / f"slurm-{v}" / f"{c}-gpu-job.txt").read_text())
        for v, c in (("22.05", "sinfo-json"), ("24.11", "sinfo-json"), ("26.05", "sinfo-json"),
                     ("24.11", "scontrol-json-d-show-node"), ("26.05", "scontrol-json-d-show-node"),
                     ("24.11", "squeue-json"), ("22.05", "squeue-json"))]
META = [d["meta"] for d in REAL]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=25)
node_keys = st.sampled_from(["name", "state", "state_flags", "reason", "reason_changed_at", "reason_set_by_user",
                             "gres", "gres_used", "partitions", "cpus", "alloc_cpus", "nodes", "node", "cpus",
                             "gres", "partition", "reason", "job_id", "job_state", "exit_code", "restart_cnt"])
records = st.dictionaries(node_keys, json_values, max_size=8)
docs = st.fixed_dictionaries({"meta": st.sampled_from(META)},
                             optional={"nodes": st.lists(records, max_size=3) | json_values,
                                       "sinfo": st.lists(records, max_size=3) | json_values,
                                       "jobs": st.lists(records, max_size=3) | json_values,
                                       "errors": json_values})
PARSERS = (parse_sinfo_json, parse_scontrol_nodes_json, parse_squeue_json, lambda t: parse_nodes_json(t, "x"))


def _only_own_errors(text: str) -> None:
    for parse in PARSERS:
        try:
            out = parse(text)
        except SlurmFormatError as e:
            assert str(e)
            continue
        recs = out[1] if isinstance(out, tuple) else out
        assert isinstance(recs, list)
        if parse is not parse_squeue_json:
            assert recs and all(isinstance(r, NodeRecord) and r.name for r in recs)   # never [] without error


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs)
def test_any_document_of_a_known_version(doc):
    _only_own_errors(json.dumps(doc))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json(value):
    _only_own_errors(json.dumps(value))


def _mutate(value, path, new):
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict) and value:
        key = sorted(value)[head % len(value)]
        return {**value, key: _mutate(value[key], rest, new)}
    if isinstance(value, list) and value:
        i = head % len(value)
        return value[:i] + [_mutate(value[i], rest, new)] + value[i + 1:]
    return new


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(REAL), st.lists(st.integers(0, 200), min_size=1, max_size=6), json_values)
def test_real_documents_with_one_field_changed(doc, path, new):
    _only_own_errors(json.dumps(_mutate(doc, path, new)))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_capture(t):
    try:
        kind, recs = parse_node_capture(t)
    except NodeCaptureError as e:
        assert str(e)
        return
    except Exception as e:   # a hostlist a user pasted that ClusterShell refuses is a usage error
        from slurmkit.errors import UsageError
        assert isinstance(e, UsageError), repr(e)
        return
    assert recs and kind


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["NodeName=n1", " State=IDLE+DRAIN", " Reason=x [root@2026-01-01T00:00:00]",
                                 " Gres=gpu:8", " GresUsed=gpu:2(IDX:0-1)", "\n", " Partitions=gpu",
                                 " CPUTot=x", "garbage ="]), max_size=20))
def test_scontrol_text_fragments(parts):
    for r in parse_scontrol_nodes("".join(parts)):
        assert r.name and r.gpus_total >= 0 and r.gpus_used >= 0
