"""The checkpoint manifest: what makes a checkpoint complete.

A checkpoint is a directory. slurmkit's helper writes its files, fsyncs them, then writes
`slurmkit-manifest.json` LAST (itself via a temporary name + rename). A directory without a valid manifest is
incomplete, whatever else it holds. The epilog's sync and `slurmkit sync` copy only complete checkpoints and
verify every file against the manifest before publishing the copy.

    {"format": "slurmkit-checkpoint/1", "step": 1200, "created": "2026-11-30T09:16:01Z", "algo": "sha256",
     "files": [{"path": "model/shard-00.bin", "size": 1073741824, "hash": "9f86d0..."}, ...]}

Paths are relative, '/'-separated, never absolute, never with '..'. Standard library only, no heavy imports.
"""

from __future__ import annotations

import json
import os

from ..settings import HASH_ALGOS
from ..files import atomic_write
from ..times import utc_iso

MANIFEST = "slurmkit-manifest.json"
FORMAT = "slurmkit-checkpoint/1"
DEFAULT_ALGO = "sha256"
CHUNK = 4 << 20


# bounds on what a manifest may hold: it is read as root's proxy (the job's user) on every epilog
MAX_FILES = 100_000  # files per checkpoint
MAX_BYTES = 64 << 20  # bytes of manifest JSON (~100,000 entries take ~15 MiB)


class ManifestError(ValueError):
    """A manifest that is not valid. `refused`: it is a real manifest we will not use (an unsupported hash,
    over a limit), as opposed to a half-written or foreign file."""

    def __init__(self, msg: str, *, refused: bool = False):
        super().__init__(msg)
        self.refused = refused


def hash_file(path: str, algo: str = DEFAULT_ALGO) -> tuple[int, str]:
    """(size, hex digest) of a file, read in large chunks."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return hash_fd(fd, algo)
    finally:
        os.close(fd)


def hash_fd(fd: int, algo: str = DEFAULT_ALGO) -> tuple[int, str]:
    """(size, hex digest) of what an open file holds from offset 0."""
    import hashlib  # lazily (as datetime): ~5 ms of OpenSSL, and the hooks import this module

    h = hashlib.new(algo)
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while True:
        n = os.preadv(fd, [buf], size)
        if not n:
            break
        h.update(view[:n])
        size += n
    return size, h.hexdigest()


def walk_files(root: str) -> list[str]:
    """Relative paths of the regular files under root (not following symlinks), sorted; the manifest excluded."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel == MANIFEST:
                continue
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            out.append(rel)
    return sorted(out)


def build(root: str, step: int, algo: str = DEFAULT_ALGO, extra: dict | None = None) -> dict:
    files = []
    for rel in walk_files(root):
        size, digest = hash_file(os.path.join(root, rel), algo)
        files.append({"path": rel, "size": size, "hash": digest})

    m = {
        "format": FORMAT,
        "step": int(step),
        "created": utc_iso(),
        "algo": algo,
        "files": files,
    }
    if extra:
        m["extra"] = extra
    return m


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(root: str, manifest: dict) -> None:
    """Write the manifest into root atomically (tmp + fsync + rename + fsync dir)."""
    atomic_write(os.path.join(root, MANIFEST), json.dumps(manifest, indent=1), fsync=True)
    fsync_dir(root)


def parse(text: str | bytes) -> dict:
    """Validate a manifest's structure; raise ManifestError saying what is wrong."""
    try:
        m = json.loads(text)
    except ValueError as e:
        raise ManifestError(f"not JSON: {e}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ManifestError(f"not a {FORMAT} manifest")
    if not isinstance(m.get("step"), int) or not isinstance(m.get("files"), list):
        raise ManifestError("manifest needs an integer 'step' and a list 'files'")
    if m.get("algo", DEFAULT_ALGO) not in HASH_ALGOS:
        raise ManifestError(
            f"unsupported hash algorithm {m.get('algo')!r} (supported: {', '.join(HASH_ALGOS)})", refused=True
        )
    if len(m["files"]) > MAX_FILES:
        raise ManifestError(f"{len(m['files'])} files listed, over the limit of {MAX_FILES}", refused=True)
    for f in m["files"]:
        p = f.get("path") if isinstance(f, dict) else None
        if (
            not isinstance(p, str)
            or not p
            or p.startswith("/")
            or "\\" in p
            or any(part in ("", ".", "..") for part in p.split("/"))
        ):
            raise ManifestError(f"bad file entry {f!r}")
        if not isinstance(f.get("size"), int) or f["size"] < 0 or not isinstance(f.get("hash"), str):
            raise ManifestError(f"bad file entry {f!r}")
    return m


def read(root: str) -> dict | None:
    """The checkpoint's manifest, or None when it has none (incomplete) or it does not parse."""
    try:
        return read_strict(root)
    except (OSError, ManifestError):
        return None


def read_strict(root: str) -> dict:
    """The checkpoint's manifest; OSError when it cannot be read, ManifestError when it is not valid (over
    MAX_BYTES or MAX_FILES, an unsupported algorithm: `refused`)."""
    with open(os.path.join(root, MANIFEST), "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ManifestError(f"over the limit of {MAX_BYTES >> 20} MiB", refused=True)
    return parse(data)


def verify(root: str, manifest: dict) -> list[str]:
    """Problems found checking root's files against the manifest (empty list: verified)."""
    problems = []
    algo = manifest.get("algo", DEFAULT_ALGO)
    for f in manifest["files"]:
        full = os.path.join(root, *f["path"].split("/"))
        try:
            if os.path.islink(full):
                problems.append(f"{f['path']}: is a symlink")
                continue
            size, digest = hash_file(full, algo)
        except OSError as e:
            problems.append(f"{f['path']}: {e.strerror}")
            continue
        if size != f["size"]:
            problems.append(f"{f['path']}: size {size} != {f['size']}")
        elif digest != f["hash"]:
            problems.append(f"{f['path']}: {algo} mismatch")
    return problems
