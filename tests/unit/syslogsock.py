"""A syslog stand-in the tests serve themselves (no syslog daemon runs here): a datagram socket the hooks are pointed
at with SLURMKIT_SYSLOG_SOCKET, and what it received."""
import socket

import pytest


@pytest.fixture
def syslog_sock(tmp_path):
    path = tmp_path / "syslog.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(str(path))
    srv.settimeout(0.2)
    yield path, srv
    srv.close()


def received(srv) -> list[str]:
    """Every datagram waiting on the socket (each a syslog line)."""
    out = []
    while True:
        try:
            out.append(srv.recv(65536).decode())
        except (socket.timeout, BlockingIOError):
            return out
