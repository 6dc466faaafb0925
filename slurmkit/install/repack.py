"""A wheel of the slurmkit this Python runs, rebuilt from its installed files (no source tree needed).

An admin who installed slurmkit from a wheel has no checkout to `pip wheel`; the installed distribution's RECORD
lists every file it put down, so the same wheel can be written back: the package, its dist-info (METADATA,
WHEEL, entry_points.txt), and the data files under <prefix>/share (templates, hook scripts) as `.data/data/`.
Console scripts are not copied: the installer on the node writes them again from entry_points.txt. The zip is
deterministic (sorted names, fixed times), so a rerun yields the same bytes and the same bundle id.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from ..errors import UsageError

_SKIP_DIST_INFO = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _entries(dist, prefix: Path) -> dict[str, bytes]:
    """wheel path -> bytes for every installed file worth carrying."""
    name_ver = f"{dist.metadata['Name']}-{dist.version}"
    out: dict[str, bytes] = {}
    for f in dist.files or []:
        parts = f.parts
        if "__pycache__" in parts or f.name.endswith(".pyc"):
            continue
        if parts[0].endswith(".dist-info") and f.name in _SKIP_DIST_INFO:
            continue
        path = Path(dist.locate_file(f)).resolve()
        if ".." not in parts:
            arc = f.as_posix()
        else:
            try:
                rel = path.relative_to(prefix.resolve())
            except ValueError:
                raise UsageError(
                    f"slurmkit's installed file {path} is outside {prefix}: cannot rebuild its "
                    "wheel; set install.wheelhouse"
                ) from None
            if rel.parts[0] == "bin":
                continue  # console scripts: written again from entry_points.txt on the node
            arc = f"{name_ver}.data/data/{rel.as_posix()}"
        try:
            out[arc] = path.read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read slurmkit's installed file: {e.strerror}", path=str(path)) from None
    return out


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(dest_dir: Path, name: str = "slurmkit") -> Path:
    """Write <name>-<version>-<tag>.whl of the installed distribution into dest_dir; return its path."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise UsageError(f"{name} is not installed as a distribution here; set install.wheelhouse") from None
    entries = _entries(dist, Path(sys.prefix))
    info = f"{dist.metadata['Name']}-{dist.version}.dist-info"
    wheel_meta = entries.get(f"{info}/WHEEL", b"").decode()
    tags = [ln.split(":", 1)[1].strip() for ln in wheel_meta.splitlines() if ln.startswith("Tag:")]
    if not tags or not any(a.startswith(f"{name}/") for a in entries):
        raise UsageError(
            f"the installed {name} has no WHEEL tag or no package files (an editable or system "
            "install?): build from a checkout, or set install.wheelhouse"
        )
    record = "".join(f"{a},{_digest(d)},{len(d)}\n" for a, d in sorted(entries.items()))
    entries[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    dest_dir.mkdir(parents=True, exist_ok=True)
    whl = dest_dir / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tags[0]}.whl"
    tmp = whl.with_name(whl.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in sorted(entries.items()):
            zi = zipfile.ZipInfo(arc, _EPOCH)
            zi.external_attr = (0o755 if "/share/slurmkit/hooks/" in arc else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    tmp.replace(whl)
    return whl
