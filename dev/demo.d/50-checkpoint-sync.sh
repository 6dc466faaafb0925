# Checkpoint sync (issue 5): only complete checkpoints travel, atomically, verified, as the job's user.
step "Checkpoints on node-local disk: three complete (manifest written last), a fourth half-written"
ck=$SLURMKIT_DEV_DIR/local/demo/ckpt
rm -rf "$ck" "$SLURMKIT_DEV_DIR/shared/ckpt/demo"
$py - "$ck" <<'PYEOF'
import os, sys
from slurmkit.checkpoint import manifest as mf
root = sys.argv[1]
for step in (100, 200, 300, 400):
    d = os.path.join(root, "step-%010d" % step)
    os.makedirs(os.path.join(d, "model"))
    for i in range(2):
        with open(os.path.join(d, "model", "shard-%d.bin" % i), "wb") as f:
            f.write(os.urandom(4 << 20))
    if step < 400:
        mf.write(d, mf.build(d, step))
PYEOF
chmod -R a+rX "$SLURMKIT_DEV_DIR/local/demo"
ls "$ck"

step "slurmkit sync --dry-run (keep the newest 2)"
$sk sync "$ck" "$SLURMKIT_DEV_DIR/shared/ckpt/demo" --keep 2 --user nobody --dry-run

step "slurmkit sync as user 'nobody' (root drops privileges first), then again: unchanged, skipped"
$sk sync "$ck" "$SLURMKIT_DEV_DIR/shared/ckpt/demo" --keep 2 --user nobody || true
$sk sync "$ck" "$SLURMKIT_DEV_DIR/shared/ckpt/demo" --keep 2 --user nobody --json |
    $py -c 'import json,sys; r=json.load(sys.stdin); print("copied", r["copied"], "skipped", r["skipped"])'
ls -l "$SLURMKIT_DEV_DIR/shared/ckpt/demo"
