"""The edge: one small interface to a node, and its paramiko implementation.

    t = connect(node, install_settings, accept_new=False)
    t.stat(path) -> RemoteFile          t.put(data, path, mode)       t.rename(src, dst)   (atomic, replaces)
    t.symlink(target, path)             t.mkdir(path, mode)           t.run(argv, timeout) -> RunResult   t.close()

`run` takes an argv list and quotes it with shlex.join for the remote shell: no user text is ever spliced into
a command line. Every operation has a timeout. Host keys: the known_hosts file (install.known_hosts, or the SSH
config's UserKnownHostsFile) and RejectPolicy; a new key is accepted (and appended) only with accept_new; a
changed key is always refused (paramiko raises BadHostKeyException before any policy is asked).

paramiko costs ~140 ms to import: only `slurmkit install` imports this module.
"""

from __future__ import annotations

import os
import select
import shlex
import stat as statmod
import threading
import time
from typing import Protocol

from ..errors import SlurmkitError
from ..proc import Result
from .plan import RemoteFile


class NodeError(SlurmkitError):
    """One node failed (the others go on)."""


class HostKeyRefused(NodeError):
    """The node's host key is unknown (without --accept-new-host-keys) or changed (always)."""


def short(argv) -> str:
    """argv for a message: an inline script is cut to its first line."""
    return shlex.join(a if len(a) < 80 and "\n" not in a else a.split("\n", 1)[0][:40] + "..." for a in map(str, argv))


class RunResult(Result, frozen=True):
    """proc.Result of a command on a node; check() raises NodeError unless it exited 0."""

    def check(self) -> RunResult:
        if self.returncode != 0:
            last = (self.stderr or self.stdout).strip().splitlines()
            raise NodeError(f"{short(self.argv)}: {last[-1] if last else f'exit code {self.returncode}'}")
        return self


class Transport(Protocol):
    node: str
    is_root: bool  # files it creates are owned by root already (no chown needed)

    def stat(self, path: str) -> RemoteFile: ...

    def put(self, data: bytes, path: str, mode: int) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def symlink(self, target: str, path: str) -> None: ...

    def mkdir(self, path: str, mode: int) -> None: ...

    def run(self, argv: list[str], timeout: float | None = None) -> RunResult: ...

    def close(self) -> None: ...


def _remote_file(path: str, st, link: str | None = None) -> RemoteFile:
    if st is None:
        return RemoteFile(path, False)
    m = st.st_mode
    kind = "link" if statmod.S_ISLNK(m) else "file" if statmod.S_ISREG(m) else "dir" if statmod.S_ISDIR(m) else "other"
    return RemoteFile(path, True, kind, None, statmod.S_IMODE(m), st.st_uid, st.st_gid, link)


class LocalTransport:
    """The same interface on this machine's own filesystem (unit tests of push/rollback, and `--local`-free
    demos); commands run through slurmkit.proc."""

    def __init__(self, node: str = "localhost", timeout: float = 60.0):
        self.node = node
        self.timeout = timeout
        self.is_root = os.geteuid() == 0

    def stat(self, path: str) -> RemoteFile:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return RemoteFile(path, False)
        return _remote_file(path, st, os.readlink(path) if statmod.S_ISLNK(st.st_mode) else None)

    def put(self, data: bytes, path: str, mode: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        from ..files import publish

        publish(src, dst)  # SFTP's posix-rename, here

    def symlink(self, target: str, path: str) -> None:
        os.symlink(target, path)

    def mkdir(self, path: str, mode: int) -> None:
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            pass
        except OSError as e:
            raise NodeError(f"mkdir {path}: {e.strerror}") from None

    def run(self, argv: list[str], timeout: float | None = None) -> RunResult:
        from .. import proc

        r = proc.run(argv, timeout=timeout or self.timeout, check=False)
        return RunResult(tuple(argv), r.returncode, r.stdout, r.stderr, r.seconds)

    def close(self) -> None:
        pass


# -- paramiko ---------------------------------------------------------------------------------------------------

_known_hosts_lock = threading.Lock()


def _accept_new_policy(paramiko, known_hosts: str, say):
    class AcceptNew(paramiko.MissingHostKeyPolicy):
        """Only for keys the known_hosts file does not have at all (a changed key never reaches a policy)."""

        def missing_host_key(self, client, hostname, key):
            client.get_host_keys().add(hostname, key.get_name(), key)
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
            with _known_hosts_lock:
                os.makedirs(os.path.dirname(known_hosts) or ".", mode=0o700, exist_ok=True)
                with open(known_hosts, "a", encoding="ascii") as f:
                    f.write(line)
            say(f"{hostname}: accepted new {key.get_name()} host key SHA256:{_fingerprint(key)} into {known_hosts}")

    return AcceptNew()


def _fingerprint(key) -> str:
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def ssh_options(node: str, install) -> dict:
    """The SSH config's answer for `node`, with install.* overrides: hostname, port, user, keys, proxy."""
    import paramiko

    cfg_path = os.path.expanduser(install.ssh_config)
    look = paramiko.SSHConfig().lookup(node)
    if os.path.exists(cfg_path):
        look = paramiko.SSHConfig.from_path(cfg_path).lookup(node)
    known = install.known_hosts
    if "userknownhostsfile" in look and install.known_hosts == "~/.ssh/known_hosts":
        known = look["userknownhostsfile"].split()[0]
    keys = list(look.get("identityfile", []))
    if install.identity_file:
        keys.insert(0, install.identity_file)
    return {
        "hostname": look.get("hostname", node),
        "port": install.port or int(look.get("port", 22)),
        "user": install.user or look.get("user") or _local_user(),
        "key_filename": [os.path.expanduser(k) for k in keys if os.path.exists(os.path.expanduser(k))] or None,
        "proxycommand": look.get("proxycommand"),
        "known_hosts": os.path.expanduser(known),
    }


def _local_user() -> str:
    import getpass

    return getpass.getuser()


def connect(node: str, install, *, accept_new: bool = False, say=lambda m: None) -> ParamikoTransport:
    import paramiko

    o = ssh_options(node, install)
    client = paramiko.SSHClient()
    if os.path.exists(o["known_hosts"]):
        client.load_system_host_keys(o["known_hosts"])  # "system": paramiko never rewrites this file
    if install.known_hosts == "~/.ssh/known_hosts" and os.path.exists("/etc/ssh/ssh_known_hosts"):
        client.load_system_host_keys("/etc/ssh/ssh_known_hosts")
    client.set_missing_host_key_policy(
        _accept_new_policy(paramiko, o["known_hosts"], say) if accept_new else paramiko.RejectPolicy()
    )
    sock = paramiko.ProxyCommand(o["proxycommand"]) if o["proxycommand"] else None
    t = install.connect_timeout
    where = f"{o['user']}@{o['hostname']}:{o['port']}"
    try:
        client.connect(
            o["hostname"],
            port=o["port"],
            username=o["user"],
            key_filename=o["key_filename"],
            timeout=t,
            banner_timeout=t,
            auth_timeout=t,
            channel_timeout=t,
            sock=sock,
            allow_agent=True,
            look_for_keys=True,
        )
    except paramiko.BadHostKeyException as e:
        client.close()
        name = e.hostname if o["port"] == 22 else f"[{e.hostname}]:{o['port']}"  # as known_hosts writes it
        raise HostKeyRefused(
            f"host key CHANGED for {name} (got {e.key.get_name()} SHA256:{_fingerprint(e.key)}, "
            f"{o['known_hosts']} has SHA256:{_fingerprint(e.expected_key)}): refused. If the node was "
            f"reinstalled, remove the old key (ssh-keygen -f {o['known_hosts']} -R '{name}') and check the new one"
        ) from None
    except paramiko.SSHException as e:
        client.close()
        if "not found in known_hosts" in str(e):
            raise HostKeyRefused(
                f"{where}: host key not in {o['known_hosts']}: refused (check the key, then "
                "add it, or rerun with --accept-new-host-keys)"
            ) from None
        raise NodeError(f"{where}: ssh: {e}") from None
    except (OSError, EOFError) as e:
        client.close()
        raise NodeError(
            f"{where}: cannot connect: {e.strerror if isinstance(e, OSError) and e.strerror else e}"
        ) from None
    return ParamikoTransport(node, client, install.command_timeout, is_root=o["user"] == "root")


class ParamikoTransport:
    def __init__(self, node: str, client, timeout: float, is_root: bool = False):
        self.node = node
        self.client = client
        self.timeout = timeout
        self.is_root = is_root
        self._sftp = None

    @property
    def sftp(self):
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
            self._sftp.get_channel().settimeout(self.timeout)
        return self._sftp

    def stat(self, path: str) -> RemoteFile:
        try:
            st = self.sftp.lstat(path)
        except FileNotFoundError:
            return RemoteFile(path, False)
        except OSError as e:
            raise NodeError(f"stat {path}: {e}") from None
        link = self.sftp.readlink(path) if statmod.S_ISLNK(st.st_mode or 0) else None
        return _remote_file(path, st, link)

    def put(self, data: bytes, path: str, mode: int) -> None:
        try:
            with self.sftp.open(path, "wx") as f:  # x: never write into an existing file
                f.set_pipelined(True)
                f.write(data)
                f.chmod(mode)
            size = self.sftp.stat(path).st_size
        except OSError as e:
            raise NodeError(f"upload {path}: {e.strerror or e}") from None
        if size != len(data):
            raise NodeError(f"upload {path}: {size} bytes arrived of {len(data)}")

    def rename(self, src: str, dst: str) -> None:
        try:
            self.sftp.posix_rename(src, dst)
        except OSError as e:
            raise NodeError(f"rename {src} -> {dst}: {e.strerror or e}") from None

    def mkdir(self, path: str, mode: int) -> None:
        try:
            self.sftp.mkdir(path, mode)
        except OSError as e:
            if not self.stat(path).exists:  # a race with another mkdir is fine
                raise NodeError(f"mkdir {path}: {e.strerror or e}") from None

    def symlink(self, target: str, path: str) -> None:
        try:
            self.sftp.symlink(target, path)
        except OSError as e:
            raise NodeError(f"symlink {path} -> {target}: {e.strerror or e}") from None

    def run(self, argv: list[str], timeout: float | None = None) -> RunResult:
        timeout = timeout or self.timeout
        cmd = shlex.join([str(a) for a in argv])
        deadline = time.monotonic() + timeout
        try:
            chan = self.client.get_transport().open_session(timeout=timeout)
            chan.settimeout(timeout)
            chan.exec_command(cmd)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if (
                    chan.exit_status_ready()
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                    and (chan.eof_received or chan.closed)
                ):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    chan.close()
                    raise NodeError(f"{short(argv)}: timed out after {timeout:g}s")
                select.select([chan], [], [], min(left, 1.0))
            rc = chan.recv_exit_status()
            chan.close()
        except NodeError:
            raise
        except Exception as e:  # noqa: BLE001 - paramiko.SSHException, socket.timeout, EOFError: the connection broke
            raise NodeError(f"{short(argv)}: {type(e).__name__}: {e}") from None
        return RunResult(tuple(str(a) for a in argv), rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def close(self) -> None:
        try:
            if self._sftp is not None:
                self._sftp.close()
        finally:
            self.client.close()


__all__ = ["Transport", "LocalTransport", "ParamikoTransport", "connect", "NodeError", "HostKeyRefused", "RunResult"]
