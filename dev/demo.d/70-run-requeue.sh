# slurmkit run: a toy training job hits its time limit, checkpoints, is requeued and resumes where it stopped.
step "slurmkit run: a 1-minute job that needs more than one allocation (USR2 40 s before the limit)"
ck=$SLURMKIT_DEV_DIR/demo-ckpt; rm -rf "$ck"; out=$SLURMKIT_DEV_DIR/demo-run.out; rm -f "$out"
job=$(printf '#!/bin/sh\nexec %s run --grace 15 --checkpoint-dir %s -- %s %s %s 200 0.25 10\n' \
      "$sk" "$ck" "$py" "$PWD/tests/toy_train.py" "$ck" |
      sbatch --parsable --time=1 --signal=B:USR2@40 --requeue --open-mode=append --output="$out")
echo "submitted job $job (200 steps of 0.25 s)"
# Slurm holds a requeued job ~2 minutes (BeginTime); the demo shortens that hold from outside, once per requeue
# (setting StartTime again and again would keep pushing the start back).
done_for=-1
for _ in $(seq 400); do
    rec=$(scontrol -o show job "$job")
    st=$(echo "$rec" | grep -o 'JobState=[A-Z_]* Reason=[^ ]*')
    restarts=$(echo "$rec" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
    case "$st" in
        "JobState=PENDING Reason=BeginTime")
            if [ "$restarts" != "$done_for" ]; then
                scontrol update JobId="$job" StartTime=now+2; done_for=$restarts
            fi ;;
        JobState=COMPLETED*|JobState=FAILED*|JobState=CANCELLED*|JobState=TIMEOUT*) break ;;
    esac
    sleep 0.5
done
grep -E 'event=(signal|checkpoint-asked|requeued|resumed)|toy: done' "$out"
echo "checkpoints: $(ls "$ck" | tr '\n' ' ')"
