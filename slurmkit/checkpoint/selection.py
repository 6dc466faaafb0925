"""What: the complete checkpoints of a source, and the plan (copy, skip, prune) against a destination."""

from __future__ import annotations

import os
import stat
from typing import Any

from . import layout
from . import manifest as mf


def _same(a: dict | None, b: dict | None) -> bool:
    if not a or not b:
        return False

    def key(m: dict) -> tuple:
        return (
            m.get("algo", mf.DEFAULT_ALGO),
            m.get("step"),
            sorted((f["path"], f["size"], f["hash"]) for f in m["files"]),
        )

    return key(a) == key(b)


def scan_source(
    root: str, marker: str | None = None, *, problems: list[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """({name: manifest, or "marker" when complete by marker only}, [incomplete names]); names sorted."""
    complete: dict[str, dict | str] = {}
    incomplete = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return {}, []
    for name in names:
        if layout.is_hidden(name):
            continue
        p = os.path.join(root, name)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):  # a symlinked checkpoint directory is refused, not followed
            continue
        m = None
        if _is_regular(os.path.join(p, mf.MANIFEST)):
            try:
                m = mf.read_strict(p)
            except mf.ManifestError as e:
                if problems is not None and e.refused:
                    problems.append(f"{name}: {mf.MANIFEST}: {e}")
        if m is not None:
            complete[name] = m
        elif marker and _is_regular(os.path.join(p, marker)):
            complete[name] = "marker"
        else:
            incomplete.append(name)
    return complete, incomplete


def _is_regular(p: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


def series_of(m: dict | None) -> str | None:
    """The job series that published a checkpoint at DEST (the sync's stamp in its manifest), if any."""
    s = m.get("sync") if isinstance(m, dict) else None
    return s.get("series") if isinstance(s, dict) and isinstance(s.get("series"), str) else None


def plan(source: dict[str, dict | str], dest: dict[str, dict], keep: int, series: str | None = None) -> dict:
    """What to copy (newest first), skip (already there, unchanged) and prune so DEST ends with the newest `keep`
    complete checkpoints of source and DEST together. Pure.

    With a `series` (the epilog's: the job id), retention counts and prunes only what that series published:
    checkpoints at DEST from other jobs (another job of the same name, or unstamped ones) are `foreign`, never
    pruned, and a source checkpoint whose name one of them holds is a `conflict`, never replaced."""
    foreign = {} if series is None else {n: m for n, m in dest.items() if series_of(m) != series}
    own = {n: m for n, m in dest.items() if n not in foreign}
    wanted = sorted(source)[-keep:]
    final = sorted(set(own) | set(wanted))[-keep:]
    copy, skip, conflict = [], [], []
    for name in reversed(wanted):
        if name not in final:
            continue
        m = source[name]
        if isinstance(m, dict) and _same(m, dest.get(name)):
            skip.append(name)
        elif name in foreign:
            conflict.append(name)
        else:
            copy.append(name)  # a marker checkpoint is compared after its manifest is built
    prune = [n for n in sorted(own) if n not in final]
    return {
        "copy": copy,
        "skip": skip,
        "prune": prune,
        "final": final,
        "foreign": sorted(foreign),
        "conflict": conflict,
    }


def build_marker_manifest(ckpt: str, marker: str, algo: str) -> dict:
    """The manifest of a checkpoint completed by a marker file (other writers), built at sync time."""
    man = mf.build(ckpt, layout.step_number(os.path.basename(ckpt)), algo=algo)
    man["extra"] = {"built_by": "slurmkit sync", "marker": marker}
    return man


def _symlinks_in(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            if os.path.islink(full):
                out.append(os.path.relpath(full, root))
    return sorted(out)
