#!/usr/bin/env python3
"""Real separate hosts for the installer's fleet tests and benchmark: one network namespace per pretend node,
joined to this machine by a veth pair, each running its own sshd on port 22, with a round-trip delay.

    with NetFleet(Path("/tmp/x"), [f"h{i}" for i in range(32)], block=1, delay_ms=10) as fleet:
        ...  # fleet.install_config() reaches them as real hosts; 2 x 10 ms = a 20 ms round trip

These are the project's own test hosts, made and removed by the test or benchmark that uses them: namespaces
named `skn<block>-<i>`, addresses 10.77.<block>.<4i+1> (this side) / .<4i+2> (the node), never routed anywhere
else. Needs root and iproute2. The delay is `tc netem` on both ends of each veth where the kernel has sch_netem;
where it does not (this project's CI machines run a kernel without it: "Specified qdisc kind is unknown"), a delay
line does it in user space: one relay process listens on this side's address of each veth and forwards every chunk,
each way, `delay_ms` after it arrived, in order, so a round trip costs 2 x delay_ms as on a wire. `down` (or
leaving the `with`) removes every namespace it made, its veth pair and the relay. Standard library only, beside
dev/sshfleet.py, whose sshd setup it reuses.
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sshfleet import SSHD, Fleet  # noqa: E402  (dev/ is not a package)

MAX_NODES = 63            # 4 addresses a node in one /24 block


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def available() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if not shutil.which("ip"):
        return "iproute2 (ip) is not installed"
    probe = "skn-probe"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot make a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def have_netem() -> bool:
    probe = "skn-probe-netem"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        r = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                            "delay", "1ms"], capture_output=True, text=True, timeout=30)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        _ip("netns", "del", probe, check=False)


class NetFleet(Fleet):
    def __init__(self, d: Path, nodes: list[str], *, block: int = 1, delay_ms: float = 10.0):
        if not 0 < len(nodes) <= MAX_NODES:
            raise ValueError(f"1 to {MAX_NODES} nodes per block")
        if not 0 <= block <= 255:
            raise ValueError("block: 0 to 255")
        super().__init__(d, nodes, base_port=2000)
        self.block = block
        self.delay_ms = delay_ms
        self.ports = {n: 22 for n in nodes}
        self.ns = {n: f"skn{block}-{i}" for i, n in enumerate(nodes)}
        self.addr = {n: f"10.77.{block}.{4 * i + 2}" for i, n in enumerate(nodes)}
        self._host_addr = {n: f"10.77.{block}.{4 * i + 1}" for i, n in enumerate(nodes)}
        self._veth = {n: f"skv{block}x{i}" for i, n in enumerate(nodes)}
        self.made: list[str] = []
        self.netem = delay_ms > 0 and have_netem()
        self.relay: subprocess.Popen | None = None
        self.delay_kind = "none" if delay_ms <= 0 else ("tc netem" if self.netem else "user-space delay line")

    # -- the network -----------------------------------------------------------------------------------------------
    def _make_host(self, n: str) -> None:
        ns, v = self.ns[n], self._veth[n]
        _ip("netns", "del", ns, check=False)               # a leftover of a killed run
        _ip("link", "del", v, check=False)
        _ip("netns", "add", ns)
        self.made.append(n)
        _ip("link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("addr", "add", f"{self._host_addr[n]}/30", "dev", v)
        _ip("link", "set", v, "up")
        for args in (["addr", "add", f"{self.addr[n]}/30", "dev", "eth0"], ["link", "set", "eth0", "up"],
                     ["link", "set", "lo", "up"]):
            _ip("-n", ns, *args)
        if self.netem:
            d = f"{self.delay_ms:g}ms"
            subprocess.run(["tc", "qdisc", "add", "dev", v, "root", "netem", "delay", d], check=True, timeout=30,
                           capture_output=True)
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                            "delay", d], check=True, timeout=30, capture_output=True)

    def start(self, timeout: float = 30.0) -> "NetFleet":
        try:
            for n in self.nodes:
                self._make_host(n)
        except BaseException:
            self.remove_hosts()
            raise
        try:
            super().start(timeout)
        except BaseException:
            self.remove_hosts()
            raise
        if self.delay_ms > 0 and not self.netem:
            self._start_relay(timeout)
        # the ssh config written by Fleet.start names 127.0.0.1 and a port: point it at the hosts instead
        cfg = [f"Host {n}\n  HostName {self.dial(n)}\n  Port 22\n  User root\n  IdentityFile {self.client_key}\n"
               f"  IdentitiesOnly yes\n" for n in self.nodes]
        self.ssh_config.write_text("\n".join(cfg))
        self.known_hosts.write_text("\n".join(self.known_line(n) for n in self.nodes) + "\n")
        return self

    def dial(self, n: str) -> str:
        """The address a client connects to for node n: the node itself, or the relay in front of it."""
        return self._host_addr[n] if self.delay_ms > 0 and not self.netem else self.addr[n]

    def _start_relay(self, timeout: float) -> None:
        routes = [[self._host_addr[n], self.addr[n]] for n in self.nodes]
        (self.dir / "relay.json").write_text(json.dumps({"delay_ms": self.delay_ms, "routes": routes}))
        log = open(self.dir / "relay.log", "ab")
        self.relay = subprocess.Popen([sys.executable, __file__, "--dir", str(self.dir), "relay"], stdout=log,
                                      stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            while True:
                try:
                    with socket.create_connection((self._host_addr[n], 22), timeout=2):
                        break
                except OSError:
                    if self.relay.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the delay relay did not start: "
                                           + (self.dir / "relay.log").read_text(errors="replace")[-500:])
                    time.sleep(0.05)

    # -- sshd in each namespace --------------------------------------------------------------------------------------
    def _sshd_config(self, n: str) -> str:
        return super()._sshd_config(n).replace("ListenAddress 127.0.0.1", f"ListenAddress {self.addr[n]}")

    def known_line(self, n: str) -> str:
        pub = (self._node_dir(n) / "host_ed25519.pub").read_text().split()
        return f"{self.dial(n)} {pub[0]} {pub[1]}"

    def _spawn(self, n: str) -> None:
        nd = self._node_dir(n)
        with open(nd / "sshd.log", "ab") as log:
            # `ip netns exec` enters the namespace and execs sshd: the pid we hold is the daemon's
            self.procs[n] = subprocess.Popen(["ip", "netns", "exec", self.ns[n], SSHD, "-D", "-e", "-f",
                                              str(nd / "sshd_config")], stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL)

    def listen_address(self, n: str) -> tuple[str, int]:
        return self.addr[n], 22

    # -- teardown ----------------------------------------------------------------------------------------------------
    def remove_hosts(self) -> None:
        for n in self.made:
            _ip("netns", "del", self.ns[n], check=False)   # takes the veth pair with it
            _ip("link", "del", self._veth[n], check=False)
        self.made = []

    def stop(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            self.relay.terminate()
            try:
                self.relay.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.relay.kill()
        self.relay = None
        super().stop()
        self.remove_hosts()


def relay(config: dict) -> None:
    """The delay line: for each [listen_addr, node_addr] route, accept on listen_addr:22 and connect to
    node_addr:22; every chunk read either way is written delay_ms after it arrived, in order."""
    import asyncio
    delay = config["delay_ms"] / 1000.0

    async def pipe(reader, writer):
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()

        async def pump():
            while True:
                due, data = await q.get()
                if data is None:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()
        task = asyncio.create_task(pump())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                q.put_nowait((loop.time() + delay, data))
        except OSError:
            pass
        q.put_nowait((0, None))
        try:
            await task
        except OSError:
            pass

    async def serve(listen, target):
        async def handle(r1, w1):
            try:
                r2, w2 = await asyncio.open_connection(target, 22)
            except OSError:
                w1.close()
                return
            await asyncio.gather(pipe(r1, w2), pipe(r2, w1))
        return await asyncio.start_server(handle, listen, 22, backlog=256)

    async def main():
        servers = [await serve(a, b) for a, b in config["routes"]]
        await asyncio.gather(*(s.serve_forever() for s in servers))
    asyncio.run(main())


def rtt_ms(addr: str, port: int = 22, samples: int = 5) -> float:
    """The median TCP connect time to addr:port, in ms (one round trip)."""
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        with socket.create_connection((addr, port), timeout=5):
            out.append((time.perf_counter() - t) * 1000)
    return sorted(out)[len(out) // 2]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--block", type=int, default=1)
    ap.add_argument("--delay-ms", type=float, default=10.0)
    ap.add_argument("cmd", choices=["up", "down", "check", "relay"])
    ap.add_argument("nodes", nargs="*")
    a = ap.parse_args(argv)
    if a.cmd == "check":
        why = available()
        print(why or "ok")
        raise SystemExit(1 if why else 0)
    if a.cmd == "relay":
        relay(json.loads((a.dir / "relay.json").read_text()))
        return
    state = a.dir / "netfleet.json"
    if a.cmd == "up":
        f = NetFleet(a.dir, a.nodes, block=a.block, delay_ms=a.delay_ms).start()
        pids = f.pids()
        if f.relay is not None:
            pids["relay"] = f.relay.pid
        state.write_text(json.dumps({"pids": pids, "ns": [f.ns[n] for n in f.nodes],
                                     "veth": [f._veth[n] for n in f.nodes]}))
        for p in [*f.procs.values(), *([f.relay] if f.relay else [])]:
            p.returncode = 0
        print(f.install_config(), end="")
        return
    st = json.loads(state.read_text()) if state.exists() else {"pids": {}, "ns": [], "veth": []}
    from sshfleet import _stop_pid
    for pid in st["pids"].values():
        _stop_pid(pid)
    for ns in st["ns"]:
        _ip("netns", "del", ns, check=False)
    for v in st["veth"]:
        _ip("link", "del", v, check=False)
    state.unlink(missing_ok=True)
    print(f"removed {len(st['ns'])} hosts", file=sys.stderr)


if __name__ == "__main__":
    main()
