# Between jobs (issue 14): slurmkit's HealthCheckProgram drains an idle node whose GPU breaks, with no job touching
# it; heavy checks run as Slurm jobs (a DCGM sweep) and drain the node whose diagnostic fails.
step "n2 is idle; its GPU falls off the bus. The health program runs as slurmd would run it (HealthCheckProgram)"
$py dev/cluster.py scenario n2 xid79
env -i SLURMD_NODENAME=n2 SLURM_CONF="$SLURM_CONF" "$SLURMKIT_DEV_DIR/hooks/health" || true
sinfo -R -o '%20N %9u %E'
$py dev/cluster.py scenario n2 healthy-h100x8
scontrol update NodeName=n2 State=RESUME

step "A DCGM sweep: one exclusive, low-priority job per node; n4 replays a real failed dcgmi diag"
$py dev/cluster.py scenario n4 dcgm-fail
$sk health --sweep gpu --checks dcgm
for _ in $(seq 100); do [ -z "$(squeue -h -n slurmkit-health-n1,slurmkit-health-n2,slurmkit-health-n3,slurmkit-health-n4)" ] && break; sleep 0.3; done
sinfo -R -o '%20N %9u %E'
rm -f "$SLURMKIT_DEV_DIR"/slurmkit/state/dcgm-*.json
$py dev/cluster.py scenario n4 healthy-h100x8
scontrol update NodeName=n4 State=RESUME
