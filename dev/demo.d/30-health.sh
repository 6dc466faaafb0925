# Health checks and the prolog (issue 3): a node replays a real Xid 79 kernel log; the prolog drains it with a
# reason that says what happened, the job runs elsewhere, and the health log keeps the evidence.
step "slurmkit check on a healthy node (n1's fake GPUs)"
SLURMKIT_FAKE_NODE=n1 $sk check || true

step "n4 on NVIDIA's mock NVML and the real nvidia-smi 535: the hardware slows GPU 5 down (nvml-mock-ctl), the clocks check names it"
if $py dev/cluster.py scenario n4 nvml-h100; then
    $py dev/cluster.py nvml n4 throttle --gpu 5 hw_slowdown hw_power_brake_slowdown
    SLURMKIT_FAKE_NODE=n4 $sk check --only clocks || true
    $py dev/cluster.py nvml n4 throttle --gpu 5 none >/dev/null
    step "A 2-node job on n3 and n4, n4's GPUs held at 382 MHz under HW Power Brake once it runs: efficiency names n4 the straggler"
    $py dev/cluster.py scenario n3 nvml-h100
    for n in n3 n4; do
        $py dev/cluster.py nvml $n util --gpu all 97 >/dev/null
        $py dev/cluster.py nvml $n clocks --gpu all 1980 >/dev/null
    done
    # braked before the job, the prolog's clocks check would drain n4 and the job would go elsewhere: the node
    # slows during the job, after both prologs passed (the script starts once they have)
    started="$SLURMKIT_DEV_DIR/demo-straggler.started"
    rm -f "$started"
    sj=$(sbatch --parsable -N 2 -w n3,n4 --gres=gpu:8 -o /dev/null --wrap "touch $started; sleep 8")
    for _ in $(seq 300); do [ -e "$started" ] && break; sleep 0.2; done
    $py dev/cluster.py nvml n4 clocks --gpu all 382 >/dev/null
    $py dev/cluster.py nvml n4 throttle --gpu all hw_power_brake_slowdown >/dev/null
    for _ in $(seq 120); do
        $sk efficiency "$sj" --json 2>/dev/null | grep -q '"node": "n[34],n[34]"' && break; sleep 0.5
    done
    $sk efficiency "$sj" | grep -E "^job|straggler" || true
    step "n4's own straggler check (last in its epilog) logged the lag and its cause in the health log (efficiency.straggler_drain_after: N drains it at the Nth lag in 24 h; 0, the default, only names it)"
    hl="$SLURMKIT_DEV_DIR/slurmkit/health/n4.jsonl"
    for _ in $(seq 60); do grep -q "\"job_id\": $sj, \"check\": \"straggler\"" "$hl" 2>/dev/null && break; sleep 0.5; done
    grep "\"job_id\": $sj, \"check\": \"straggler\"" "$hl" | tail -1 |
        $py -c 'import json, sys; r = json.loads(sys.stdin.read()); print(r["node"], r["context"], r["status"] + ":", r["reason"])' || true
    $py dev/cluster.py scenario n3 healthy-h100x8
    $py dev/cluster.py scenario n4 healthy-h100x8
fi

step "slurmkit check on a file from a support ticket (a real dmesg with Xid 48, 63, 94)"
$sk check --capture xid=tests/fixtures/xid/h100-dmesg-xid48-63-94-dbe-contained.txt || true

step "slurmkit check on more captured files: a real Azure NVL node whose NVLink fabric reads Completed but 'Insufficient Resources' (it passed a grep for N/A), and a real 8x H100 -q judged by the fabric, temperature, VBIOS and persistence checks"
$sk check --capture fabric=tests/fixtures/dcgm/azure-miv50-nvlink-fabric-completed-insufficient-resources-cliqueid-0-zero-uuid-dedented-azhpc-506.txt || true
q=tests/fixtures/dcgm/h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt
$sk check --capture fabric=$q --capture temperature=$q --capture vbios=$q --capture gpu_config=$q || true

step "slurmkit check --capture ib: a real iblinkinfo of a 3-host EDR fabric, every host port Active at 4X EDR"
$sk check --capture ib=tests/fixtures/ib/edr-sb7700-3host-iblinkinfo-grep-up.txt || true

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
