"""The job spec: what users get for good and bad input (file:line, closest key, exit 2)."""
import textwrap

import pytest

from slurmkit.errors import UsageError
from slurmkit.jobs import spec as specmod


def load(text, sets=()):
    return specmod.loads(textwrap.dedent(text), "job.yaml", sets)


def err(text, sets=()):
    with pytest.raises(UsageError) as e:
        load(text, sets)
    assert e.value.exit_code == 2
    return str(e.value)


def test_a_full_spec_loads_with_types_and_lines():
    s = load("""
        name: ft
        partition: gpu
        nodes: 2
        gpus_per_node: 8
        cpus_per_gpu: auto
        time: "1-00:00:00"
        launcher: torchrun
        command: [train.py, --lr, "1e-4"]
        env: {NCCL_DEBUG: WARN, N: 1}
        preemption: {signal_lead: 300, max_requeues: 2}
        sweep: {lr: [1e-4, 3e-4], seed: [1, 2, 3]}
        """)
    assert s.nodes == 2 and s.cpus_per_gpu == "auto" and s.command == ["train.py", "--lr", "1e-4"]
    assert s.env == {"NCCL_DEBUG": "WARN", "N": "1"}
    assert s.preemption.signal_lead == 300 and s.preemption.requeue is True
    assert s.sweep["lr"] == ["1e-4", "3e-4"]           # text as written, not floats
    assert len(s.sweep_grid()) == 6 and s.sweep_grid()[1] == {"lr": "1e-4", "seed": "2"}
    assert s.lines["gpus_per_node"] == 5 and s.lines["preemption.signal_lead"] == 11


def test_unknown_key_names_line_and_closest_key():
    assert err("command: x\ngpus_pernode: 3\n") == \
        "job.yaml:2: unknown key 'gpus_pernode'; did you mean 'gpus_per_node'?"
    assert err("command: x\npreemption:\n  signal_led: 3\n") == \
        "job.yaml:3: unknown key 'preemption.signal_led'; did you mean 'signal_lead'?"


def test_wrong_types_and_values_name_the_key():
    assert err("command: x\nnodes: two\n").startswith("job.yaml:2: nodes: expected an integer")
    assert "did you mean 'torchrun'" in err("command: x\nlauncher: torchrn\n")
    assert err("command: x\ntime: 1h\n") == \
        "job.yaml:2: time: expected a Slurm time (MM, HH:MM:SS, D-HH:MM..., or UNLIMITED), got '1h'"
    assert err("command: x\nmem: 64GB\n").startswith("job.yaml:2: mem: expected a size like 64G")
    assert err("command: x\nenv:\n  BAD-NAME: 1\n") == \
        "job.yaml:3: env.BAD-NAME: is not a valid environment variable name (letters, digits, _)"
    assert err("command: x\nname: \"a\\nb\"\n") == "job.yaml:2: name: must be a single line"
    assert err("command: x\nsbatch: [exclusive]\n").startswith("job.yaml:2: sbatch[0]: expected an sbatch option")
    assert err("command: x\ncpus_per_gpu: 0\n") == "job.yaml:2: cpus_per_gpu: must be at least 1 (or `auto`)"


def test_unlimited_time_and_lower_case_sizes():
    s = load("command: x\ntime: UNLIMITED\nmem: 64g\npreemption: {signal_lead: 60000}\n")
    assert s.time == "UNLIMITED" and s.mem == "64g"


def test_missing_command_and_non_mapping():
    assert err("name: x\n") == \
        "job.yaml: command: a job needs a command (a string of shell text, or a list of arguments)"
    assert err("- a\n- b\n").startswith("job.yaml:1: a job spec is a mapping")
    assert err("command: [x\n").startswith("job.yaml:2: YAML syntax error")


def test_signal_lead_must_fit_in_the_time_limit():
    assert err("command: x\ntime: \"10\"\npreemption:\n  signal_lead: 600\n") == \
        "job.yaml:4: preemption.signal_lead: 600s is not inside the time limit 10 (600s)"


def test_sweep_checks():
    assert err("command: x\nsweep:\n  lr: []\n") == "job.yaml:3: sweep.lr: needs at least one value"
    assert err("command: x\nsweep_parallel: 2\n") == "job.yaml:2: sweep_parallel: only makes sense with a sweep"
    assert "--array is made from `sweep`" in err("command: x\nsweep: {a: [1]}\nsbatch: [--array=1-3]\n")


def test_set_overrides_with_types_and_clear_errors():
    s = load("command: x\ngpus_per_node: 1\n", ["gpus_per_node=4", "preemption.signal_lead=30", "env.A=b c",
                                                  "command=[echo, hi]", "sweep.lr=[1, 2]"])
    assert s.gpus_per_node == 4 and s.preemption.signal_lead == 30 and s.env == {"A": "b c"}
    assert s.command == ["echo", "hi"] and s.sweep == {"lr": ["1", "2"]}
    # a value that is not valid YAML for the key, but the key takes a string: the text as typed
    assert load("command: x\n", ['command=echo "a: b" {c}']).command == 'echo "a: b" {c}'
    assert load("command: x\n", ["name=[x"]).name == "[x"
    assert err("command: x\n", ["gpus_per_nod=4"]) == \
        "--set gpus_per_nod=4: unknown key 'gpus_per_nod'; did you mean 'gpus_per_node'?"
    assert err("command: x\n", ["nodes=many"]).startswith("--set nodes=many: nodes: expected an integer")
    assert err("command: x\n", ["time=abc"]).startswith("--set time: expected a Slurm time")
    assert err("command: x\n", ["nodes=[1"]).startswith("--set nodes=[1: cannot parse the value as YAML: ")
    assert "expected ',' or ']'" in err("command: x\n", ["nodes=[1"])  # libyaml's words (one loader)
    assert err("command: x\n", ["nodes"]) == "--set nodes: expected KEY=VALUE (or KEY+=VALUE to add to a list)"
    assert err("command: x\n", ["nodes.x=1"]) == "--set nodes.x=1: 'nodes' has no sub-keys"


@pytest.mark.parametrize("text,secs", [("30", 1800), ("5:00", 300), ("01:00:00", 3600), ("2-0", 172800),
                                       ("1-02:03", 93780), ("1-00:00:05", 86405)])
def test_slurm_time_formats(text, secs):
    assert specmod.time_seconds(text) == secs
