# Health checks and the prolog (issue 3): a node replays a real Xid 79 kernel log; the prolog drains it with a
# reason that says what happened, the job runs elsewhere, and the health log keeps the evidence.
step "slurmkit check on a healthy node (n1's fake GPUs)"
SLURMKIT_FAKE_NODE=n1 $sk check || true

step "n4 on NVIDIA's mock NVML and the real nvidia-smi 535: the hardware slows GPU 5 down (nvml-mock-ctl), the clocks check names it"
if $py dev/cluster.py scenario n4 nvml-h100; then
    $py dev/cluster.py nvml n4 throttle --gpu 5 hw_slowdown hw_power_brake_slowdown
    SLURMKIT_FAKE_NODE=n4 $sk check --only clocks || true
    $py dev/cluster.py nvml n4 throttle --gpu 5 none >/dev/null
    step "A 2-node job on n3 and n4, n4's GPUs held at 382 MHz under HW Power Brake: efficiency names n4 the straggler"
    $py dev/cluster.py scenario n3 nvml-h100
    for n in n3 n4; do
        $py dev/cluster.py nvml $n util --gpu all 97 >/dev/null
        $py dev/cluster.py nvml $n clocks --gpu all 1980 >/dev/null
    done
    $py dev/cluster.py nvml n4 clocks --gpu all 382 >/dev/null
    $py dev/cluster.py nvml n4 throttle --gpu all hw_power_brake_slowdown >/dev/null
    sj=$(sbatch --parsable -N 2 -w n3,n4 --gres=gpu:8 -o /dev/null --wrap "sleep 5")
    for _ in $(seq 120); do
        $sk efficiency "$sj" --json 2>/dev/null | grep -q '"node": "n[34],n[34]"' && break; sleep 0.5
    done
    $sk efficiency "$sj" | grep -E "^job|straggler" || true
    $py dev/cluster.py scenario n3 healthy-h100x8
    $py dev/cluster.py scenario n4 healthy-h100x8
fi

step "slurmkit check on a file from a support ticket (a real dmesg with Xid 48, 63, 94)"
$sk check --capture xid=tests/fixtures/xid/h100-dmesg-xid48-63-94-dbe-contained.txt || true

step "n3 now replays a real Xid 79 capture; a job lands on n3 (n1, n2, n4 are busy)"
$py dev/cluster.py scenario n3 xid79
busy=""
for n in n1 n2 n4; do
    busy="$busy $(printf '#!/bin/sh\nsleep 60\n' | sbatch --parsable -w $n --gres=gpu:8 --exclusive -o /dev/null)"
done
sleep 2
job=$(printf '#!/bin/sh\necho "job $SLURM_JOB_ID ran on $SLURMD_NODENAME"\n' |
      sbatch --parsable --gres=gpu:1 --output="$SLURMKIT_DEV_DIR/demo-health.out")
for _ in $(seq 100); do sinfo -h -R -o %E | grep -q slurmkit: && break; sleep 0.2; done
sinfo -R -o '%20N %9u %E'
step "The job was requeued; free the healthy nodes (StartTime skips Slurm's 120 s requeue delay)"
# shellcheck disable=SC2086
scancel $busy
for _ in $(seq 50); do [ "$(squeue -h -j "$job" -o %T)" = PENDING ] && break; sleep 0.2; done
scontrol update JobId="$job" StartTime=now+2 2>/dev/null || true
for _ in $(seq 100); do [ -s "$SLURMKIT_DEV_DIR/demo-health.out" ] && break; sleep 0.3; done
cat "$SLURMKIT_DEV_DIR/demo-health.out"
step "The evidence in the health log"
grep -h '"status": "fail"' "$SLURMKIT_DEV_DIR"/slurmkit/health/n3.jsonl | tail -1 | $py -m json.tool | sed -n 1,30p   # sed reads it all: head's early exit broke json.tool's pipe (exit 32 under pipefail)
$py dev/cluster.py scenario n3 healthy-h100x8
scontrol update NodeName=n3 State=RESUME
