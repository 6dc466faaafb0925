#!/usr/bin/env bash
# Install what slurmkit's demo, tests and benchmarks need on a fresh Debian 12 machine (as root), idempotently:
# Slurm + munge + sshd + debootstrap from Debian packages, and a virtual environment at .venv with slurmkit and its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sinfo /usr/sbin/munged /usr/sbin/sshd; do
    [ -x "$b" ] || need_apt=(slurmctld slurmd slurm-client munge openssh-server openssh-client)
done
# debootstrap makes the Slurm 24.11/26.05 root filesystems (dev/rootfs.py) on first use
[ -x /usr/sbin/debootstrap ] || need_apt+=(debootstrap)
# iproute2 makes the network-namespace test hosts of the installer's fleet tests (dev/netfleet.py)
[ -x /usr/sbin/ip ] || [ -x /bin/ip ] || need_apt+=(iproute2)
py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    need_apt+=(python3 python3-venv python3-pip)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "[bootstrap] apt-get install ${need_apt[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

stamp=.venv/.slurmkit-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "[bootstrap] creating .venv and installing slurmkit[test]" >&2
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>/dev/null || true
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
    echo "$want" > "$stamp"
fi

# NVIDIA's real nvidia-smi (535, from Debian's non-free nvidia-smi package; only the binary) for the dev cluster's
# mock-NVML nodes (dev/fakenvml.py, scenarios dev/fakegpu/scenarios/nvml-*); about 10 s on a fresh machine
nvsmi=${SLURMKIT_NVIDIA_SMI_CACHE:-/var/cache/slurmkit-nvidia-smi}
if [ -f ../shared/tools/nvml-mock/get-nvidia-smi.sh ] && [ ! -x "$nvsmi/nvidia-smi" ]; then
    echo "[bootstrap] fetching nvidia-smi into $nvsmi" >&2
    bash ../shared/tools/nvml-mock/get-nvidia-smi.sh "$nvsmi"
fi
