"""Jobs as Slurm reports them (slurmkit/slurm/jobs.py): squeue/scontrol output captured from the dev cluster
(Slurm 22.05.8, 2026-12-02) parsed into what `slurmkit jobs` and slurmkit.Job show; the run events read back; the
munge and sbatch messages said by their cause. The handle on a real cluster: tests/integration/test_jobs_cluster.py."""
import pytest

from slurmkit.jobs.handle import Job
from slurmkit.errors import UsageError
from slurmkit.slurm import jobs as sj
from slurmkit.slurm.diagnose import auth_problem, client_error

# `squeue -h -r -t all -O <SQUEUE_FORMAT>` on the dev cluster: a job with 2 GPUs, an array's 3 tasks, a job that
# exited 3 with a `|` in its name, one killed by signal 9 (captured, copied as printed)
SQUEUE = """\
1|1|N/A|root|COMPLETED|None|n1|1|0:31|UNLIMITED|gres:gpu:2|0|0|gpu|/tmp/jh-%j.out|/tmp/jh-%j.out|demo
3|2|0|root|COMPLETED|None|n1|1|0:21|UNLIMITED|N/A|0|0|gpu|/tmp/jh-%A_%a.out|/tmp/jh-%A_%a.out|arr
4|2|1|root|COMPLETED|None|n1|1|0:21|UNLIMITED|N/A|0|0|gpu|/tmp/jh-%A_%a.out|/tmp/jh-%A_%a.out|arr
2|2|2|root|COMPLETED|None|n1|1|0:21|UNLIMITED|N/A|0|0|gpu|/tmp/jh-%A_%a.out|/tmp/jh-%A_%a.out|arr
5|5|N/A|root|FAILED|NonZeroExitCode|n1|1|0:01|UNLIMITED|N/A|0|768|gpu|/tmp/jh-%j.out|/tmp/jh-%j.out|a long name with | pipe and spaces 1234567890 abcdefghijklmnopqrstuvwxyz
6|6|N/A|root|FAILED|JobLaunchFailure|n1|1|0:01|UNLIMITED|N/A|0|9|gpu|/tmp/jh-%j.out|/tmp/jh-%j.out|wrap
7|7|N/A|root|FAILED|NonZeroExitCode|n1|1|0:00|UNLIMITED|gres:gpu:1|0|768|gpu|/tmp/jh-out-%j.txt|/tmp/jh-out-%j.txt|jhtest
"""

# `scontrol -o show job 4` (array task 2_1), captured
SCONTROL_TASK = (
    "JobId=4 ArrayJobId=2 ArrayTaskId=1 JobName=arr UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=COMPLETED Reason=None Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:21 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-12-02T06:47:29 EligibleTime=2026-12-02T06:47:29 AccrueTime=2026-12-02T06:47:29 "
    "StartTime=2026-12-02T06:47:29 EndTime=2026-12-02T06:47:50 Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-12-02T06:47:29 Scheduler=Main Partition=gpu AllocNode:Sid=localhost:19730 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList=n1 BatchHost=n1 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=1000M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryCPU=1000M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK "
    "Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp StdErr=/tmp/jh-2_1.out "
    "StdIn=/dev/null StdOut=/tmp/jh-2_1.out Power= \n"
)

# stderr of `squeue -h` run as a user who may not open munge's socket (the dev cluster's munge dir is 0700 root)
MUNGE_DENIED = """\
squeue: error: If munged is up, restart with --num-threads=10
squeue: error: Munge encode failed: Failed to access "/tmp/sk-jobhandle-dev/munge/munge.socket": Permission denied (Did you start munged?)
squeue: error: slurm_send_node_msg: auth_g_create: REQUEST_JOB_INFO has authentication error
slurm_load_jobs error: Protocol authentication error
"""


def test_squeue_rows_carry_state_gpus_exit_code_and_array_ids():
    rows = {r.id: r for r in sj.parse_squeue(SQUEUE)}
    assert list(rows) == ["1", "2_0", "2_1", "2_2", "5", "6", "7"]
    assert rows["1"].gpus == 2 and rows["1"].state == "COMPLETED" and rows["1"].exit_code == 0
    assert rows["2_1"].job_id == 4 and rows["2_1"].array_job_id == 2 and rows["2_1"].array_task_id == 1
    assert rows["2_1"].stdout == "/tmp/jh-2_1.out"             # the pattern %A_%a expanded as Slurm does
    assert rows["5"].exit_code == 3 and rows["5"].name.startswith("a long name with | pipe")
    assert rows["6"].exit_code == 0 and rows["6"].exit_signal == 9
    assert rows["7"].stdout == "/tmp/jh-out-7.txt" and rows["7"].gpus == 1


def test_squeue_of_24_11_prints_exit_codes_as_code_colon_signal_and_no_error_file():
    # `squeue -h -r -t all -j 1 -O <SQUEUE_FORMAT>` on the dev cluster's Slurm 24.11.5, a job that exited 3
    line = ("1|1|N/A|root|FAILED|NonZeroExitCode|n1|1|0:01|UNLIMITED|gres/gpu:1|0|3:0|gpu|/tmp/jh-%j.out|(null)|"
            "wrap\n")
    (st,) = sj.parse_squeue(line)
    assert (st.exit_code, st.exit_signal, st.gpus, st.stdout, st.stderr) == (3, None, 1, "/tmp/jh-1.out",
                                                                             "/tmp/jh-1.out")


def test_squeue_output_of_another_shape_is_an_error_naming_the_line():
    with pytest.raises(ValueError, match="squeue line 2: expected 17"):
        sj.parse_squeue(SQUEUE.splitlines()[0] + "\nslurm_load_jobs error: Invalid job id specified\n")


def test_scontrol_record_of_an_array_task():
    (st,) = sj.parse_scontrol_jobs(SCONTROL_TASK)
    assert (st.id, st.job_id, st.state, st.exit_code, st.stdout) == ("2_1", 4, "COMPLETED", 0, "/tmp/jh-2_1.out")


def test_a_job_arrays_own_id_is_the_summary_of_its_tasks():
    rows = sj.parse_squeue(SQUEUE)
    st = sj.pick("2", rows)
    assert (st.id, st.state, st.array_task_id, st.exit_code) == ("2", "COMPLETED", None, 0)
    assert sj.pick("2_1", rows).job_id == 4
    running = [sj.JobStatus(id="9_0", job_id=9, state="COMPLETED", array_job_id=9, array_task_id=0),
               sj.JobStatus(id="9_1", job_id=10, state="RUNNING", array_job_id=9, array_task_id=1),
               sj.JobStatus(id="9_2", job_id=11, state="FAILED", exit_code=2, array_job_id=9, array_task_id=2)]
    assert sj.array_summary(9, running).state == "RUNNING" and not sj.array_summary(9, running).final
    done = [running[0], running[2]]
    assert sj.array_summary(9, done).state == "FAILED" and sj.array_summary(9, done).exit_code == 2


def test_run_events_and_their_summary():
    text = ("toy: resumed step=40\n"
            "slurmkit run: 2026-12-02T07:00:00Z job=12 restart=1 event=start argv=\"python t.py\"\n"
            "slurmkit run: 2026-12-02T07:00:01Z job=12 restart=1 event=resumed step=40 checkpoint=/ck/step-40\n")
    events = sj.run_events(text)
    assert [e["event"] for e in events] == ["start", "resumed"]
    assert sj.event_summary(events[-1]) == "resumed step=40"


def test_unreachable_munge_is_said_as_such():
    msg = auth_problem(MUNGE_DENIED)
    assert msg.startswith("cannot reach munge at /tmp/sk-jobhandle-dev/munge/munge.socket: Permission denied")
    assert client_error("squeue", MUNGE_DENIED).startswith("squeue: cannot reach munge")


def test_sbatch_error_does_not_repeat_its_name():
    # sbatch's own stderr for a partition that does not exist (dev cluster)
    err = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    assert client_error("sbatch", err) == "sbatch: Batch job submission failed: Invalid partition name specified"


def test_job_ids_compare_with_ints_and_strings():
    j = Job(123)
    assert int(j) == 123 and j == 123 and j == "123" and str(j) == "123" and j != 124
    assert Job("120_3") == "120_3" and Job("120_3") != 120
    for bad in ("x", "12_", "1;rm", ""):
        with pytest.raises(UsageError):
            Job(bad)


def test_output_pattern_expansion():
    st = sj.JobStatus(id="2_1", job_id=4, name="arr", user="ann", array_job_id=2, array_task_id=1)
    assert sj.expand_output_pattern("/o/%x-%A_%a-%j-%u-%%-%5a.out", st) == "/o/arr-2_1-4-ann-%-00001.out"
