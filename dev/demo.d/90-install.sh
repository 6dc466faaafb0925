# slurmkit install: 4 "nodes" (real sshd daemons on loopback ports 7490-7493, each its own host key, each
# installing under $SLURMKIT_DEV_DIR/sshfleet/nodes/<node>/), then the cluster's slurmd running what it installed.
(
skd=$SLURMKIT_DEV_DIR/sshfleet
rm -rf "$skd"
trap '$py dev/cluster.py hooks >/dev/null 2>&1; $py dev/sshfleet.py --dir "$skd" down' EXIT
ssh_port=${SLURMKIT_DEMO_SSH_PORT:-7490}
step "Start 4 sshd 'nodes' n1..n4 on 127.0.0.1:$ssh_port-$((ssh_port + 3)) (own host keys; ssh config + known_hosts for them)"
$py dev/sshfleet.py --dir "$skd" --port "$ssh_port" up n1 n2 n3 n4 > "$skd.install.yaml"
cfg=$skd/site.yaml
cat "$SLURMKIT_CONFIG" "$skd.install.yaml" > "$cfg"
sed -n '/^install:/,$p' "$cfg"

step "slurmkit install --dry-run: what would change on n1 (the others alike)"
$sk --config "$cfg" install --nodes 'n[1-4]' --dry-run 2>/dev/null | sed -n '/^n1:/,/^n2:/p' | sed '$d'

step "slurmkit install: stage, hash-check, rename into place, venv, stamp; 4 nodes at once"
$sk --config "$cfg" install --nodes 'n[1-4]'

step "Again: nothing changes"
$sk --config "$cfg" install --nodes 'n[1-4]' 2>/dev/null | sed -n 1,5p

step "n3 gets a new host key (a reinstall, or an attacker): refused, the others fine (exit 1)"
$py dev/sshfleet.py --dir "$skd" rekey n3
$sk --config "$cfg" install --nodes 'n[1-4]' 2>&1 | grep -E '^(NODE|n[0-9])|failed' || true

step "The cluster's slurmd runs the installed prolog (its wrapper now execs <fleet>/nodes/<node>/.../prolog)"
$py dev/cluster.py hooks --prolog "$skd/nodes/{node}/etc/slurm/slurmkit/prolog"
tail -1 "$SLURMKIT_DEV_DIR/hooks/prolog"
job=$(printf '#!/bin/sh\ntrue\n' | sbatch --parsable -w n2 -o /dev/null)
for _ in $(seq 100); do st=$(squeue -h -j "$job" -o %T); [ -z "$st" ] && break; sleep 0.2; done
echo "job $job: $(scontrol -o show job "$job" | grep -o 'JobState=[A-Z]*') (a failing prolog would have drained n2)"
$sk nodes n2
)
