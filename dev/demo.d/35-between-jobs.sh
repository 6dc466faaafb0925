# Between jobs (issue 14): slurmkit's HealthCheckProgram drains an idle node whose GPU breaks, with no job touching
# it; remediation (opt-in) reboots it through the dev RebootProgram and it returns once its GPU is healthy again;
# heavy checks run as Slurm jobs (a DCGM sweep) and drain the node whose diagnostic fails.
step "n2 is idle; its GPU falls off the bus. The health program runs as slurmd would run it (HealthCheckProgram)"
$py dev/cluster.py scenario n2 xid79
env -i SLURMD_NODENAME=n2 SLURM_CONF="$SLURM_CONF" "$SLURMKIT_DEV_DIR/hooks/health" || true
sinfo -R -o '%20N %9u %E'

step "Remediation (health.remediate, opt-in): the next run reboots n2 (scontrol reboot: it comes back drained)"
conf=$SLURMKIT_DEV_DIR/slurmkit.yaml
cp "$conf" "$conf.demo-saved"
sed 's/^health:$/health:\n  remediate: true/' "$conf.demo-saved" > "$conf.tmp" && mv "$conf.tmp" "$conf"
hold=$SLURMKIT_DEV_DIR/fakegpu/boot/n2.hold
touch "$hold"                  # the dev RebootProgram keeps n2 "in POST" while the reboot fixes its GPU
env -i SLURMD_NODENAME=n2 SLURM_CONF="$SLURM_CONF" "$SLURMKIT_DEV_DIR/hooks/health" || true
sinfo -h -N -n n2 -o '%N %T'
$py dev/cluster.py scenario n2 healthy-h100x8      # what the reboot fixed
rm -f "$hold"
for _ in $(seq 60); do scontrol -o show node n2 | grep -q 'State=IDLE' && break; sleep 0.5; done
step "n2 is back on a new boot, still drained; the first health run of that boot rechecks every check (it passes) and resumes it"
env -i SLURMD_NODENAME=n2 SLURM_CONF="$SLURM_CONF" "$SLURMKIT_DEV_DIR/hooks/health" && echo "n2 healthy"
$py - "$SLURMKIT_DEV_DIR/slurmkit/health/n2.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["check"] == "remediate":
        print(r["time"], r["action"], "-", r["reason"])
PY
sinfo -N -n n2 -o '%N %T'
mv "$conf.demo-saved" "$conf"

step "A DCGM sweep: one exclusive, low-priority job per node; n4 replays a real failed dcgmi diag"
$py dev/cluster.py scenario n4 dcgm-fail
$sk health --sweep gpu --checks dcgm
for _ in $(seq 100); do [ -z "$(squeue -h -n slurmkit-health-n1,slurmkit-health-n2,slurmkit-health-n3,slurmkit-health-n4)" ] && break; sleep 0.3; done
sinfo -R -o '%20N %9u %E'
rm -f "$SLURMKIT_DEV_DIR"/slurmkit/state/dcgm-*.json
$py dev/cluster.py scenario n4 healthy-h100x8
scontrol update NodeName=n4 State=RESUME
