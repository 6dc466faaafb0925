"""What a node is called and what its slurm.conf says to a hook: the node-name check every per-node file name goes
through, and the few slurm.conf keys the hooks need (their timeouts, slurmd's log file, ClusterName: the agent's
socket). Builtin modules only: the hook client imports this before anything else, on every job."""

from __future__ import annotations

import posix

SLURM_CONF = "/etc/slurm/slurm.conf"
CONF_LIMIT = 1 << 20  # slurm.conf is read up to 1 MiB; keys past that count as unset
_CONF_KEYS = (
    b"prologepilogtimeout",
    b"prologtimeout",
    b"epilogtimeout",
    b"batchstarttimeout",
    b"slurmdlogfile",
    b"clustername",
)
_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NAME_REST = _NAME_FIRST | frozenset(".+-")


def safe_node_name(node: str) -> bool:
    """A node name that can name a file of its own in a directory (letters, digits, `_.+-`, not starting with a dot
    or a dash, at most 255 characters): a record's `node` is data, and must never lead out of the directory."""
    return 0 < len(node) <= 255 and node[0] in _NAME_FIRST and all(c in _NAME_REST for c in node)


def parse_slurm_conf(data: bytes) -> dict[bytes, bytes]:
    """The few slurm.conf keys a hook needs (lower-case key -> value, the last one wins), from lines of the form
    `Key=Value` (comments and every other key ignored; `Include` files are not followed)."""
    out: dict[bytes, bytes] = {}
    for line in data.split(b"\n"):
        line = line.split(b"#", 1)[0].strip()
        key, sep, value = line.partition(b"=")
        key = key.strip().lower()
        if sep and key in _CONF_KEYS:
            value = value.strip().split()[0] if value.strip() else b""
            out[key] = value.strip(b"\"'")
    return out


def slurm_conf(environ) -> dict[bytes, bytes]:
    """parse_slurm_conf of $SLURM_CONF (slurmd gives it to the prolog and epilog), else of /etc/slurm/slurm.conf;
    {} when it cannot be read (a configless node): the defaults then apply."""
    path = environ.get(b"SLURM_CONF") or SLURM_CONF.encode()
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return {}
    try:
        chunks, size = [], 0
        while size < CONF_LIMIT:
            b = posix.read(fd, min(65536, CONF_LIMIT - size))
            if not b:
                break
            chunks.append(b)
            size += len(b)
    except OSError:
        return {}
    finally:
        posix.close(fd)
    return parse_slurm_conf(b"".join(chunks))
