"""`slurmkit install`: put the prolog, epilog, site config and slurmkit itself on every node over SSH, safely.

    layout.py    where each thing goes on a node (pure)
    bundle.py    what is installed: the hook scripts, the config, a wheelhouse (slurmkit + what it needs)
    payload.py   the prebuilt venv: built once here from the wheelhouse, one tarball for every node that fits
    plan.py      per node, what would change; the rollback target (pure functions over remote state)
    ssh.py       the edge: one small Transport interface (stat, put, rename, run argv with a timeout, close)
                 and its paramiko implementation (paramiko is imported only here, only by `install`)
    push.py      gather remote state, stage-verify-commit the plan, build the venv, roll back, verify
    fanout.py    bounded concurrency over nodes, a progress bar on a tty
    slurmconf.py the slurm.conf lines the hooks need, checked against `scontrol show config`

On a node (all paths under `install.*`, each may start with `install.root`):

    /etc/slurm/slurmkit/prolog, epilog   the repo's scripts with a 3-line preamble naming the venv and config
    /etc/slurmkit/config.yaml            the site config
    /opt/slurmkit/wheels/slurmkit-venv.tar.gz  the prebuilt venv it was unpacked from (install.prebuilt_venv)
    /opt/slurmkit/wheels/*.whl           or: the wheels the venv was built from (a node whose Python differs)
    /opt/slurmkit/venv-<bundle>/         a venv with slurmkit (built with pypa/installer, no pip, no index)
    /opt/slurmkit/venv -> venv-<bundle>  the live venv (switched atomically; venv.slurmkit-prev is the last one)
    /etc/slurmkit/installed.json         the version stamp, written last
    <file>.slurmkit-prev                 the version each file had before the last change (for --rollback)
"""
