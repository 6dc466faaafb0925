"""The CLI backend's node listing for the submit's cluster check: one `scontrol -o -d show node`, no `sinfo --version`
first, read into the same records as the version's JSON of the same moment (the dev cluster's 22.05 captures), and
an answer it cannot read is an error that says what it got. Slurm's tools are stand-in scripts in `bin_dir`."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit.slurm.cli_backend import CliBackend, SlurmNoAnswer
from slurmkit.slurm.slurm_json import parse_sinfo_json

LOCAL = Path(__file__).resolve().parents[2] / "fixtures" / "local"
ONELINE = LOCAL / "dev-cluster-slurm22.05-scontrol-o-d-show-node-mixed-drain.txt"
SINFO_JSON = LOCAL / "dev-cluster-slurm22.05-sinfo-json-mixed-drain.txt"  # the same moment


def tools(tmp_path: Path, answer: Path) -> tuple[Path, Path]:
    """A bin_dir whose scontrol prints `answer` and logs its arguments; its sinfo fails (the check must not ask)."""
    log = tmp_path / "calls"
    for tool, body in (("scontrol", f"cat '{answer}'"), ("sinfo", "exit 9")):
        p = tmp_path / tool
        p.write_text(f"#!/bin/sh\necho \"{tool} $*\" >> '{log}'\n{body}\n")
        p.chmod(0o755)
    return tmp_path, log


def test_the_check_asks_once_and_reads_what_the_versions_json_reads(tmp_path, utc_local_time):
    bin_dir, log = tools(tmp_path, ONELINE)
    said: list[str] = []
    recs = CliBackend(timeout=5, bin_dir=str(bin_dir), say=said.append).nodes_for_check()
    assert log.read_text() == "scontrol -o -d show node\n"  # one Slurm call, no `sinfo --version`
    assert said == ["nodes from `scontrol -o -d show node`"]
    want = parse_sinfo_json(SINFO_JSON.read_text())
    assert [r.to_dict() for r in recs] == [r.to_dict() for r in want]
    assert [r.name for r in recs if r.drained] == ["n2", "n4"]


@pytest.mark.parametrize(
    "answer, got",
    [
        ("", "an empty answer"),
        ("No nodes in the system\n", "'No nodes in the system'"),
        ('{"meta": {}, "nodes": []}\n', "'{\"meta\": {}, \"nodes\": []}'"),
    ],
)
def test_an_answer_without_nodes_is_no_answer_saying_what_it_got(tmp_path, answer, got):
    text = tmp_path / "answer.txt"
    text.write_text(answer)
    bin_dir, _ = tools(tmp_path, text)
    with pytest.raises(SlurmNoAnswer) as e:
        CliBackend(timeout=5, bin_dir=str(bin_dir)).nodes_for_check()
    assert str(e.value) == f"scontrol -o -d show node: no NodeName= lines in {got}; expected one line per node"
    assert e.value.exit_code == 3
