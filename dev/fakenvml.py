"""The dev cluster's real nvidia-smi over NVIDIA's mock NVML (../shared/tools/nvml-mock), per fake node.

`setup(d)` puts into d/fakegpu/nvml: `nvidia-smi` (NVIDIA's 535 binary, copied from the cache dev/bootstrap.sh
fills), `lib`, `bin` and `configs` (links to the shared mock library, its nvml-mock-ctl and its GPU profiles,
by their real paths: the root filesystems of 24.11/26.05 see ../shared's target at the same path, not ../shared) and `nodes/` (one MOCK_NVML_OVERRIDES file per node, NODE.yaml).
dev/fakegpu/bin/fake-tool execs that nvidia-smi for a node whose scenario has an `nvml` file (its GPU profile).
`ctl(d, node, args)` runs nvml-mock-ctl on that node's overrides file: what a test does to fail a GPU mid-job.
Standard library only."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MOCK = REPO.parent / "shared" / "tools" / "nvml-mock"
# where dev/bootstrap.sh puts NVIDIA's binary (get-nvidia-smi.sh); shared by every checkout on the machine
CACHE = Path(os.environ.get("SLURMKIT_NVIDIA_SMI_CACHE", "/var/cache/slurmkit-nvidia-smi"))


def available() -> str | None:
    """None when the mock and the binary are here, else what is missing (a test skips, naming it)."""
    for p in (MOCK / "lib" / "libnvidia-ml.so.1", MOCK / "bin" / "nvml-mock-ctl", CACHE / "nvidia-smi"):
        if not p.exists():
            return f"{p} is missing (dev/bootstrap.sh fetches nvidia-smi; the mock is ../shared/tools/nvml-mock)"
    return None


def setup(d: Path) -> bool:
    """d/fakegpu/nvml for this cluster; False (and nothing made) when the mock or the binary is absent."""
    if available():
        return False
    m = d / "fakegpu" / "nvml"
    (m / "nodes").mkdir(parents=True, exist_ok=True)
    for name in ("lib", "bin", "configs"):
        link = m / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.realpath(MOCK / name))
    shutil.copy2(CACHE / "nvidia-smi", m / "nvidia-smi")
    return True


def ready(d: Path) -> str | None:
    """None when cluster `d` has the mock NVML set up (inside a root fs too), else what is missing."""
    m = d / "fakegpu" / "nvml"
    for p in (m / "nvidia-smi", m / "lib" / "libnvidia-ml.so.1", m / "bin" / "nvml-mock-ctl"):
        if not p.exists():
            return f"{p} is missing (dev/bootstrap.sh fetches nvidia-smi; the mock is ../shared/tools/nvml-mock)"
    return None


def node_env(d: Path, node: str, profile: str = "h100") -> dict[str, str]:
    m = d / "fakegpu" / "nvml"
    return {"MOCK_NVML_OVERRIDES": str(m / "nodes" / f"{node}.yaml"),
            "MOCK_NVML_CONFIG": str(m / "configs" / f"mock-nvml-config-{profile}.yaml")}


def reset(d: Path, node: str) -> None:
    """A node's GPUs as its profile says (a new scenario or a new cluster starts healthy)."""
    (d / "fakegpu" / "nvml" / "nodes" / f"{node}.yaml").unlink(missing_ok=True)


def ctl(d: Path, node: str, args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    """nvml-mock-ctl ARGS on NODE's GPUs (e.g. ["fail", "--gpu", "3", "--mode", "fallen_off_bus"])."""
    scen = d / "fakegpu" / "nodes" / node / "nvml"
    profile = scen.read_text().split()[0] if scen.exists() else "h100"
    return subprocess.run([str(d / "fakegpu" / "nvml" / "bin" / "nvml-mock-ctl"), *args], env=dict(os.environ, **node_env(d, node, profile)),
                          capture_output=True, text=True, timeout=timeout)
