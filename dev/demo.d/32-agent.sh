# The hook agent (issue 18): the prolog and epilog hand their work to a per-node agent that has slurmkit loaded,
# and run in their own process whenever it is not there. Same verdicts, a fraction of the CPU per job.
step "Start the hook agent; 8 one-GPU jobs then run their prolog and epilog through it"
$py dev/cluster.py agent start
mark=$(wc -l < "$SLURMKIT_DEV_DIR/log/agent.log")
arr=$(sbatch --parsable --array=1-8 --gres=gpu:1 -o /dev/null --wrap true)
for _ in $(seq 150); do [ -z "$(squeue -h -j "${arr%%;*}" -o %i)" ] && break; sleep 0.2; done
sleep 1
tail -n +"$((mark + 1))" "$SLURMKIT_DEV_DIR/log/agent.log" | sort -t' ' -k5n | head -6
step "slurmkit agent status: the agent answers on this cluster's socket; its pid, uptime, hooks served, last error"
$sk agent status --socket "$SLURMKIT_DEV_DIR/run/agent/agent.sock" || true
step "Without the agent (stopped), the same hooks run in their own processes: nothing else changes"
$py dev/cluster.py agent stop
$sk agent status --socket "$SLURMKIT_DEV_DIR/run/agent/agent.sock" || echo "(exit $?: not running)"
job=$(printf '#!/bin/sh\ntrue\n' | sbatch --parsable --gres=gpu:1 -o /dev/null)
for _ in $(seq 150); do [ -z "$(squeue -h -j "$job" -o %i)" ] && break; sleep 0.2; done
sleep 1
grep -h "\"job_id\": $job," "$SLURMKIT_DEV_DIR"/slurmkit/health/*.jsonl | $py -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("%-7s %-10s %-5s %s" % (r["context"], r["check"], r["status"], r["reason"]))'
