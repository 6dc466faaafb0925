#!/usr/bin/env python3
"""Real sshd daemons on loopback ports, one per pretend node, for the installer's tests, demo and benchmark.

    fleet = Fleet(Path("/tmp/x"), ["n1", "n2"], base_port=7470).start()
    fleet.ssh_config, fleet.known_hosts, fleet.root   # files to point `slurmkit install` at
    fleet.rekey("n2")                                  # new host key, same port: a "reinstalled" node
    fleet.stop()                                       # every sshd it started, by pid

Each node gets its own host key (ed25519), one client key is authorized for all, `StrictModes no` (the keys
live under /tmp), `UsePAM no`, the sftp subsystem (internal-sftp), ListenAddress 127.0.0.1 only, and
HOME=<dir>/home for remote commands: bash sources ~/.bashrc for every command sshd runs, and this machine's root
~/.bashrc runs `pyenv init` (~90 ms of CPU each); a pretend node should start commands as a plain node does.
The ssh config maps each node name to its port, so `slurmkit install --nodes n[1-2]` reaches them like real hosts. Installs go under
`<dir>/nodes/<node>/` (install.root). Standard library only.

    python3 dev/sshfleet.py --dir D --port 7470 up n1 n2    # prints the config to use; `down` stops them
    python3 dev/sshfleet.py --dir D rekey n2                # n2 gets a new host key (known_hosts keeps the old)
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def _keygen(path: Path) -> None:
    for p in (path, path.with_suffix(".pub")):
        if p.exists():
            p.unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True, timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Fleet:
    def __init__(self, d: Path, nodes: list[str], base_port: int):
        if not 1024 < base_port and base_port + len(nodes) <= 65535:
            raise ValueError("port out of range")
        self.dir = Path(d)
        self.nodes = list(nodes)
        self.ports = {n: base_port + i for i, n in enumerate(nodes)}
        self.procs: dict[str, subprocess.Popen] = {}
        self.client_key = self.dir / "client" / "id_ed25519"
        self.ssh_config = self.dir / "client" / "ssh_config"
        self.known_hosts = self.dir / "client" / "known_hosts"
        self.root = self.dir / "nodes"

    # -- setup ---------------------------------------------------------------------------------------------------
    def _node_dir(self, n: str) -> Path:
        return self.dir / "sshd" / n

    def start(self, timeout: float = 15.0) -> "Fleet":
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)   # sshd's privilege separation directory
        (self.dir / "client").mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.dir / "home").mkdir(exist_ok=True)
        if not self.client_key.exists():
            _keygen(self.client_key)
        (self.dir / "client" / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        cfg, known = [], []
        for n in self.nodes:
            nd = self._node_dir(n)
            nd.mkdir(parents=True, exist_ok=True)
            if not (nd / "host_ed25519").exists():
                _keygen(nd / "host_ed25519")
            (nd / "sshd_config").write_text(self._sshd_config(n))
            cfg.append(f"Host {n}\n  HostName 127.0.0.1\n  Port {self.ports[n]}\n  User root\n"
                       f"  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n")
            known.append(self.known_line(n))
        self.ssh_config.write_text("\n".join(cfg))
        self.known_hosts.write_text("\n".join(known) + "\n")
        try:
            for n in self.nodes:
                self._spawn(n)
            self._wait(self.nodes, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _sshd_config(self, n: str) -> str:
        nd = self._node_dir(n)
        return (f"Port {self.ports[n]}\nListenAddress 127.0.0.1\nHostKey {nd}/host_ed25519\nPidFile {nd}/sshd.pid\n"
                f"AuthorizedKeysFile {self.dir}/client/authorized_keys\nStrictModes no\nUsePAM no\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
                f"SetEnv HOME={self.dir}/home\n"
                "Subsystem sftp internal-sftp\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n")

    def known_line(self, n: str) -> str:
        pub = (self._node_dir(n) / "host_ed25519.pub").read_text().split()
        return f"[127.0.0.1]:{self.ports[n]} {pub[0]} {pub[1]}"

    def _spawn(self, n: str) -> None:
        nd = self._node_dir(n)
        log = open(nd / "sshd.log", "ab")
        # -D: stay in the foreground, so the pid we hold is the daemon's; -e: log to stderr (the log file)
        self.procs[n] = subprocess.Popen([SSHD, "-D", "-e", "-f", str(nd / "sshd_config")], stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def listen_address(self, n: str) -> tuple[str, int]:
        """Where node n's sshd listens."""
        return "127.0.0.1", self.ports[n]

    def _wait(self, nodes: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for n in nodes:
            while True:
                p = self.procs[n]
                if p.poll() is not None:
                    raise RuntimeError(f"sshd for {n} exited {p.returncode}: "
                                       + (self._node_dir(n) / "sshd.log").read_text(errors="replace")[-500:])
                host, port = self.listen_address(n)
                try:
                    with socket.create_connection((host, port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"sshd for {n} not listening on {host}:{port} after {timeout}s")
                    time.sleep(0.05)

    # -- changes -------------------------------------------------------------------------------------------------
    def rekey(self, n: str) -> None:
        """A new host key for node n (as after a reinstall); known_hosts keeps the old one."""
        self._stop_one(n)
        _keygen(self._node_dir(n) / "host_ed25519")
        self._spawn(n)
        self._wait([n], 15)

    def forget(self, n: str) -> None:
        """Remove node n from known_hosts (an unknown host)."""
        keep = [ln for ln in self.known_hosts.read_text().splitlines()
                if not ln.startswith(f"[127.0.0.1]:{self.ports[n]} ")]
        self.known_hosts.write_text("\n".join(keep) + "\n")

    def node_root(self, n: str) -> Path:
        return self.root / n

    def install_config(self, **extra) -> str:
        """An `install:` section that reaches this fleet and installs under <dir>/nodes/<node>/ (keys in `extra`
        replace or add to these)."""
        keys = {"root": f"{self.root}/{{node}}", "ssh_config": str(self.ssh_config),
                "known_hosts": str(self.known_hosts), "python": "/usr/bin/python3", "connect_timeout": 10,
                "command_timeout": 120, **extra}
        return "install:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in keys.items())

    # -- teardown ------------------------------------------------------------------------------------------------
    def _stop_one(self, n: str) -> None:
        p = self.procs.pop(n, None)
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)

    def stop(self) -> None:
        for n in list(self.procs):
            self._stop_one(n)

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items()}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _stop_pid(pid: int) -> None:
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--port", type=int, default=7470)
    ap.add_argument("cmd", choices=["up", "down", "rekey"])
    ap.add_argument("nodes", nargs="*")
    a = ap.parse_args(argv)
    pidfile = a.dir / "sshfleet.json"
    if a.cmd == "up":
        f = Fleet(a.dir, a.nodes, a.port)
        f.start()
        # the daemons outlive this process: record their pids for `down`
        pidfile.write_text(json.dumps(f.pids()))
        for p in f.procs.values():
            p.returncode = 0   # do not reap or kill them at exit
        print(f.install_config(), end="")
        return
    pids = json.loads(pidfile.read_text()) if pidfile.exists() else {}
    if a.cmd == "rekey":   # a new host key for each named node, same port (as after a reinstall)
        for n in a.nodes:
            _stop_pid(pids[n])
            nd = a.dir / "sshd" / n
            _keygen(nd / "host_ed25519")
            with open(nd / "sshd.log", "ab") as log:
                pids[n] = subprocess.Popen([SSHD, "-D", "-e", "-f", str(nd / "sshd_config")], stdout=log,
                                           stderr=log, stdin=subprocess.DEVNULL).pid
        pidfile.write_text(json.dumps(pids))
        time.sleep(0.3)
        return
    for n, pid in pids.items():
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for pid in pids.values():
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    print(f"stopped {len(pids)} sshd", file=sys.stderr)


if __name__ == "__main__":
    main()
