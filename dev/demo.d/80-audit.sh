# slurmkit audit: who took nodes out of service, why, since when, with a next step; resume only slurmkit's drains.
step "Take nodes out of service: an admin drains n2; n4's (plain, non-slurmkit) prolog fails a job"
scontrol update NodeName=n2 State=DRAIN Reason="admin: PSU swap ticket 4411"
printf '#!/bin/sh\necho "site prolog: /scratch not mounted" >&2\nexit 1\n' > "$SLURMKIT_DEV_DIR/hooks/prolog.n4"
chmod +x "$SLURMKIT_DEV_DIR/hooks/prolog.n4"
sbatch --parsable -w n4 --wrap 'sleep 1' >/dev/null
if [ -d dev/fakegpu/scenarios/xid79 ] && $sk check --help >/dev/null 2>&1; then
    echo "n3 replays an Xid 79 capture: slurmkit's prolog drains it"
    $py dev/cluster.py scenario n3 xid79
    sbatch --parsable -w n3 --wrap 'sleep 1' >/dev/null
fi
for _ in $(seq 60); do sinfo -h -n n4 -o %E | grep -q 'Prolog error' && break; sleep 0.5; done
sleep 2

step "slurmkit audit"
$sk audit || true

step "slurmkit audit resume n[2-4] --recheck: only slurmkit's drain, and only if its check passes now"
$sk audit resume 'n[2-4]' --recheck || true

step "Fix things; resume n3 after its check passes, force the others (saying whose reason it overrides)"
rm -f "$SLURMKIT_DEV_DIR/hooks/prolog.n4"
$py dev/cluster.py scenario n3 healthy-h100x8
$sk audit resume n3 --recheck || true
$sk audit resume 'n[2,4]' --force || true
scancel -p gpu 2>/dev/null || true
