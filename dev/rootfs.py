#!/usr/bin/env python3
"""Debian root filesystems that carry newer Slurm releases than the host has, and a way to run commands in them.

    python3 dev/rootfs.py ensure --slurm 24.11          # build (or reuse) the cached root fs; prints its path
    python3 dev/rootfs.py run --slurm 24.11 -- CMD...   # run CMD inside it, the host's paths visible (see below)
    python3 dev/rootfs.py venv --slurm 24.11            # the repo's venv for that root fs's Python; prints its path

Slurm 24.11 comes from Debian 13 "trixie", 26.05 from Debian "sid" (no Debian release has the versions between).
Each root fs is made once with debootstrap from Debian's archive, with the packages below installed, and cached
outside the repository in $SLURMKIT_ROOTFS_CACHE (default /var/cache/slurmkit-rootfs/<suite>) with a stamp file
that records the suite and package list: it is rebuilt only when missing or when the stamp differs. A lock file
serialises builds when several clusters or test runs start at once.

`run` enters a private mount namespace (`unshare --mount --propagation private`), bind-mounts /proc, /sys, /dev,
/tmp, the repository, the host's CA bundle, pip configuration and the local wheel directories it names, /etc/hosts
and /etc/resolv.conf at the SAME paths inside, then chroots and execs. Nothing is mounted in the host's namespace:
the mounts vanish with the last process of the namespace (a daemon keeps its own alive), so nothing leaks and any
number of clusters and test runs can share one root fs. Standard library only: dev/cluster.py imports it.

Facts this relies on are in ../shared/DESIGN.md ("Newer Slurm on these machines").
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SLURMKIT_ROOTFS_CACHE", "/var/cache/slurmkit-rootfs"))
MIRROR = os.environ.get("SLURMKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
HOST_SLURM = "22.05"
SUITES = {"24.11": "trixie", "26.05": "sid"}
VERSIONS = (HOST_SLURM, *SUITES)
# what the dev cluster, the test suite (sshd for `install`, a venv) and the demo need inside; bumping this list
# rebuilds the cached root fs on its next use
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge", "python3", "python3-venv", "procps",
            "ca-certificates", "openssh-server", "openssh-client",
            "e2fsprogs"]        # chattr: the install tests make a directory immutable
# a file inside the root fs saying which suite it is: dev/cluster.py run inside it does not enter it again
MARK = "etc/slurmkit-rootfs"
# the host's pip configuration (index, find-links, CA bundle): pip inside needs it to reach the same packages
PIP_CONFIG = ["/etc/pip.conf", "/etc/xdg/pip", "/root/.config/pip", "/root/.pip"]


def log(msg: str) -> None:
    print(f"[rootfs] {msg}", file=sys.stderr, flush=True)


def suite_of(version: str) -> str:
    try:
        return SUITES[version]
    except KeyError:
        raise SystemExit(f"rootfs: no root fs for Slurm {version!r} (known: {', '.join(SUITES)}; "
                         f"{HOST_SLURM} is the host's)") from None


def inside() -> str | None:
    """The suite of the root fs this process runs in, or None on the host."""
    try:
        return Path("/", MARK).read_text().strip() or None
    except OSError:
        return None


def root_of(suite: str) -> Path:
    return CACHE / suite


def stamp_text(suite: str, packages=PACKAGES) -> str:
    return json.dumps({"suite": suite, "mirror": MIRROR, "packages": sorted(packages)}, indent=1) + "\n"


def _stamp(suite: str) -> dict | None:
    try:
        return json.loads((root_of(suite) / ".slurmkit-stamp").read_text())
    except (OSError, ValueError):
        return None


def _same_base(suite: str) -> bool:
    old = _stamp(suite)
    return bool(old) and old.get("suite") == suite and old.get("mirror") == MIRROR and \
        (root_of(suite) / "usr" / "bin" / "apt-get").exists()


def is_current(suite: str) -> bool:
    """The cached root fs has this suite, this mirror and (at least) these packages: a checkout whose list is
    shorter (an older branch) uses a root fs that a newer one topped up, instead of rebuilding it back."""
    return _same_base(suite) and set(PACKAGES) <= set(_stamp(suite).get("packages", ()))


def ensure(version: str) -> Path:
    """The root fs for this Slurm version, built first if missing or stale."""
    suite = suite_of(version)
    if inside() == suite:                   # already in it (a test or the demo run inside calls dev/cluster.py)
        return Path("/")
    root = root_of(suite)
    if is_current(suite):
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_current(suite):        # another process may have built it while we waited
            t0 = time.monotonic()
            if _same_base(suite):
                # only packages to add: installed in place (clusters running from it keep running)
                log(f"{root}: installing the packages its stamp lacks")
                _provision(root, suite, sorted(set(PACKAGES) | set(_stamp(suite).get("packages", ()))))
            else:
                build(suite)
            log(f"{suite} root fs ready in {root} ({time.monotonic() - t0:.0f}s)")
    return root


def _apt_env() -> dict[str, str]:
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8",
            "HOME": "/root"}


def _provision(root: Path, suite: str, packages: list[str]) -> None:
    """apt-get install `packages` inside `root` (idempotent), then the files the dev cluster relies on and the
    stamp, written last."""
    # no daemon may start from a package's postinst (openssh-server would take port 22 of the host)
    policy = root / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    resolv = root / "etc" / "resolv.conf"
    if resolv.is_symlink() or not resolv.is_file():
        resolv.unlink(missing_ok=True)
        resolv.touch()                              # a mount point: the host's is bound over it
    with open(CACHE / f"{suite}.log", "a") as out:
        # the archive this machine reaches may be a snapshot whose sid Release file is past its Valid-Until
        for argv in (["apt-get", "-o", "Acquire::Check-Valid-Until=false", "update", "-qq"],
                     ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                     ["apt-get", "clean"]):
            out.flush()
            r = subprocess.run(enter_argv(root, argv, binds=_system_binds()), timeout=1800, env=_apt_env(),
                               stdout=out, stderr=subprocess.STDOUT)
            if r.returncode:
                raise SystemExit(f"rootfs: {' '.join(argv)} failed (exit {r.returncode}) in {root}; "
                                 f"see {CACHE / f'{suite}.log'}")
    (root / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    (root / MARK).write_text(suite + "\n")
    (root / ".slurmkit-stamp").write_text(stamp_text(suite, packages))


def _users(root: Path) -> list[int]:
    """Pids whose root directory is `root` (daemons and commands running in it)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.readlink(p / "root") == str(root):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def build(suite: str) -> None:
    """A new root fs from debootstrap in <suite>.build (kept and topped up if a run stopped half way), then
    swapped in for the cached one."""
    root = root_of(suite)
    work = CACHE / f"{suite}.build"
    if not (work / "usr" / "bin" / "apt-get").exists():
        shutil.rmtree(work, ignore_errors=True)
        if shutil.which("debootstrap") is None:
            raise SystemExit("rootfs: debootstrap is missing (apt-get install debootstrap; dev/bootstrap.sh does)")
        log(f"debootstrap {suite} into {work} (a few minutes, once)")
        with open(CACHE / f"{suite}.log", "w") as out:
            r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite,
                                str(work), MIRROR], stdout=out, stderr=subprocess.STDOUT, timeout=1800)
        if r.returncode:
            raise SystemExit(f"rootfs: debootstrap {suite} from {MIRROR} failed (exit {r.returncode}); "
                             f"see {CACHE / f'{suite}.log'}")
    _provision(work, suite, sorted(PACKAGES))
    busy = _users(root)
    if busy:
        # removing it would detach the bind mounts of those processes' namespaces (measured: a venv build then
        # wrote into the root fs itself); the new one waits in <suite>.build for the next run
        raise SystemExit(f"rootfs: {root} is in use by pids {' '.join(map(str, busy[:10]))}: stop them (their "
                         f"clusters: dev/cluster.py down) and run again; the new root fs is ready in {work}")
    if root.exists():
        old = CACHE / f"{suite}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(root, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(work, root)


# --- entering ------------------------------------------------------------------------------------------------

def _system_binds() -> list[str]:
    return ["/proc", "/sys", "/dev", "/etc/hosts", "/etc/resolv.conf"]


def _pip_binds() -> list[str]:
    """The host's pip configuration, its CA bundle and the local directories it (or $PIP_*) names."""
    paths = [p for p in PIP_CONFIG if os.path.exists(p)]
    text = " ".join(v for k, v in os.environ.items() if k.startswith("PIP_"))
    for p in paths:
        for f in (Path(p).rglob("*") if os.path.isdir(p) else [Path(p)]):
            if f.is_file() and f.stat().st_size < 1 << 20:
                text += " " + f.read_text(errors="replace")
    for m in re.findall(r"(?:file://)?(/[\w.+-]+(?:/[\w.+-]+)*)", text):
        top = "/" + m.strip("/").split("/")[0]
        # /opt/pypi/simple -> bind /opt/pypi (its files/ sit beside simple/); never a whole system directory
        parts = Path(m).parts
        cand = str(Path(*parts[:3])) if len(parts) >= 3 else m
        if top in ("/opt", "/srv", "/var", "/root", "/home", "/etc") and os.path.exists(cand):
            paths.append(cand)
    return paths


def binds_for(extra: list[str] = ()) -> list[str]:
    repo_parent = REPO.parent
    shared = [str(p) for p in (repo_parent / "shared", repo_parent.parent / "shared") if p.is_dir()]
    paths = [*_system_binds(), "/tmp", str(REPO), "/etc/ssl/certs", *_pip_binds(), *shared, *extra]
    out: list[str] = []
    for p in paths:
        p = os.path.realpath(p)
        if os.path.exists(p) and p not in out:
            out.append(p)
    return out


def enter_argv(root: Path, argv: list[str], binds: list[str] | None = None, cwd: str | None = None) -> list[str]:
    """An argv that runs `argv` chrooted into `root`, in a private mount namespace with `binds` mounted at the
    same paths inside."""
    b = binds_for() if binds is None else binds
    pre = ["unshare", "--mount", "--propagation", "private", "--", sys.executable, str(Path(__file__).resolve()),
           "_enter", "--root", str(root), "--cwd", cwd or os.getcwd()]
    for p in b:
        pre += ["--bind", p]
    return [*pre, "--", *argv]


def _enter(a) -> None:
    root = Path(a.root)
    for src in a.bind:
        dst = root / src.lstrip("/")
        if os.path.isdir(src):
            dst.mkdir(parents=True, exist_ok=True)
        elif not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.touch()
        subprocess.run(["mount", "--rbind", src, str(dst)], check=True, timeout=30)
    os.chroot(root)
    try:
        os.chdir(a.cwd)
    except OSError:
        os.chdir("/")
    try:
        os.execvp(a.argv[0], a.argv)
    except OSError as e:
        raise SystemExit(f"rootfs: cannot run {a.argv[0]!r} inside {root}: {e}") from None


def command(version: str, argv: list[str], cwd: str | None = None, binds: list[str] = ()) -> list[str]:
    """argv wrapped to run where Slurm `version`'s tools are: unchanged for the host's Slurm or when this process
    already runs inside that root fs. `binds`: more host paths to show inside (e.g. a cluster directory)."""
    if version == HOST_SLURM:
        return list(argv)
    suite = suite_of(version)
    if inside() == suite:
        return list(argv)
    return enter_argv(ensure(version), argv, binds=binds_for(list(binds)), cwd=cwd)


# --- the repo's venv for a root fs's Python --------------------------------------------------------------------

def venv_dir(version: str) -> Path:
    return REPO / (".venv" if version == HOST_SLURM else f".venv-{version}")


def ensure_venv(version: str) -> Path:
    """The repo's venv built with that root fs's Python (3.13 on trixie, 3.14 on sid), slurmkit[test] installed
    editable; rebuilt when pyproject.toml or the root fs's Python changes (the stamp holds both)."""
    v = venv_dir(version)
    if version == HOST_SLURM:
        return v
    root = ensure(version)
    with open(v.with_name(v.name + ".lock"), "w") as lock:     # one build at a time (test.sh prepares ahead)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_venv(version, v, root)


def _ensure_venv(version: str, v: Path, root: Path) -> Path:
    import hashlib
    py = Path(os.path.realpath(root / "usr" / "bin" / "python3"))   # e.g. <root>/usr/bin/python3.13
    st = py.stat()
    want = f"{hashlib.sha256((REPO / 'pyproject.toml').read_bytes()).hexdigest()} {py.name} {st.st_size} " \
        f"{int(st.st_mtime)}"
    stamp = v / ".slurmkit-installed"
    if (v / "bin" / "python").exists() and stamp.exists() and stamp.read_text().strip() == want:
        return v
    t0 = time.monotonic()
    out = v.with_name(v.name + ".log")
    log(f"building {v} with {suite_of(version)}'s python3 and installing slurmkit[test] (log: {out})")
    shutil.rmtree(v, ignore_errors=True)
    with open(out, "w") as f:
        for argv in (["python3", "-m", "venv", str(v)],
                     [str(v / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                      "-e", f"{REPO}[test]"]):
            f.flush()
            r = subprocess.run(command(version, argv, cwd=str(REPO)), timeout=1800, stdout=f, stderr=subprocess.STDOUT)
            if r.returncode:
                raise SystemExit(f"rootfs: {' '.join(argv)} failed (exit {r.returncode}) in the {version} root fs; "
                                 f"see {out}")
    stamp.write_text(want + "\n")
    log(f"{v} ready ({time.monotonic() - t0:.0f}s)")
    return v


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("ensure", "venv", "run"):
        s = sub.add_parser(name)
        s.add_argument("--slurm", required=True, choices=list(SUITES))
        if name == "run":
            s.add_argument("argv", nargs=argparse.REMAINDER)
    e = sub.add_parser("_enter")            # internal: the part that runs inside the new mount namespace
    e.add_argument("--root", required=True)
    e.add_argument("--cwd", required=True)
    e.add_argument("--bind", action="append", default=[])
    e.add_argument("argv", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.cmd == "_enter":
        a.argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
        _enter(a)
    elif a.cmd == "ensure":
        print(ensure(a.slurm))
    elif a.cmd == "venv":
        print(ensure_venv(a.slurm))
    else:
        cmd = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
        if not cmd:
            raise SystemExit("rootfs run: no command")
        cmd = command(a.slurm, cmd)
        os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
