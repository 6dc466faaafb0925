"""The check before sbatch, on node records parsed from the dev cluster's real `sinfo --json` capture."""
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.jobs import spec as specmod
from slurmkit.jobs.check import check_request
from slurmkit.slurm.slurm_json import parse_sinfo_json

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "local" / "dev-cluster-slurm22.05-sinfo-json-mixed-drain.txt"


@pytest.fixture(scope="module")
def records():
    return parse_sinfo_json(FIX.read_text())


def spec(text):
    return specmod.loads(text, "job.yaml")


def refused(text, records, cpus=None, partition="gpu"):
    s = spec(text)
    with pytest.raises(UsageError) as e:
        check_request(s, partition if partition != "spec" else s.partition, cpus, records)
    assert e.value.exit_code == 2
    return str(e.value)


def test_the_capture_is_the_dev_cluster(records):
    assert {r.name for r in records} == {"n1", "n2", "n3", "n4"} and all(r.gpus_total == 8 for r in records)


def test_a_request_that_fits_passes(records):
    check_request(spec("command: x\npartition: gpu\nnodes: 4\ngpus_per_node: 8\n"), "gpu", 16, records)
    check_request(spec("command: x\ngpus_per_node: 1\n"), None, None, records)   # default partition


def test_too_many_gpus_per_node_is_refused_with_the_line(records):
    msg = refused("command: x\npartition: gpu\ngpus_per_node: 9\n", records)
    assert msg == ("job.yaml:3: gpus_per_node: 9 GPUs per node requested, but the nodes of partition gpu have at most "
                   "8; refused before submission")


def test_unknown_partition_suggests_the_closest(records):
    assert refused("command: x\npartition: gpus\n", records, partition="spec") == \
        "job.yaml:2: partition: 'gpus' does not exist on this cluster; did you mean 'gpu'?"
    assert refused("command: x\npartition: zzz\n", records, partition="spec") == \
        "job.yaml:2: partition: 'zzz' does not exist on this cluster (partitions: gpu)"


def test_a_value_from_set_is_named_as_such(records):
    s = specmod.loads("command: x\ngpus_per_node: 1\n", "job.yaml", ["gpus_per_node=12"])
    with pytest.raises(UsageError) as e:
        check_request(s, "gpu", None, records)
    assert str(e.value) == ("--set gpus_per_node: 12 GPUs per node requested, but the nodes of partition gpu have at "
                            "most 8; refused before submission")


def test_too_many_nodes_or_cpus_is_refused(records):
    assert refused("command: x\nnodes: 5\ngpus_per_node: 8\n", records).startswith(
        "job.yaml:2: nodes: 5 nodes requested, but partition gpu has 4 with 8 GPUs or more")
    assert "asks 32 CPUs per node, but the nodes of partition gpu with 8 GPUs have at most 16" in \
        refused("command: x\ngpus_per_node: 8\ncpus_per_gpu: 4\n", records, cpus=32)
