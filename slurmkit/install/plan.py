"""Per node: what would change, and what a rollback would restore. Pure functions over the remote state.

The remote state is what `push.gather()` read over SSH: for each path, whether it exists, its sha256, mode
and owner (RemoteFile), and the venv link. Nothing here touches the network, so every rule is unit-tested.
"""

from __future__ import annotations

import json
import posixpath
from ..record import Record, field

from .bundle import Artifact
from .layout import COMPLETE, PREV, Layout


class RemoteFile(Record, frozen=True, kw_only=False):
    path: str
    exists: bool
    kind: str = "file"  # file | dir | link | other
    sha256: str | None = None
    mode: int | None = None  # permission bits
    uid: int | None = None
    gid: int | None = None
    link: str | None = None  # a symlink's target


MISSING = RemoteFile("", False)


class Change(Record, frozen=True, kw_only=False):
    action: str  # create | update | fix-mode | build-venv | switch-venv | restore
    path: str
    detail: str = ""

    def to_dict(self) -> dict:
        return {"action": self.action, "path": self.path, "detail": self.detail}


class NodePlan(Record, kw_only=False):
    node: str
    changes: list[Change] = field(default_factory=list)
    uploads: list[Artifact] = field(default_factory=list)  # files to stage, verify and commit, stamp last
    build_venv: str | None = None  # venv dir to build (venv-<bundle>)
    switch_venv: str | None = None  # what the venv link must point to
    problems: list[str] = field(default_factory=list)  # reasons this node cannot be installed

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def parse_sha256sum(text: str) -> dict[str, str]:
    """`sha256sum -- a b` output -> {path: hex}. Lines for names with a backslash or newline start with '\\'."""
    out = {}
    for line in text.splitlines():
        escaped = line.startswith("\\")
        if escaped:
            line = line[1:]
        digest, sep, name = line.partition("  ")
        if not sep:
            digest, sep, name = line.partition(" *")
        if not sep or len(digest) != 64:
            continue
        if escaped:
            name = name.replace("\\n", "\n").replace("\\\\", "\\")
        out[name] = digest.lower()
    return out


def file_change(a: Artifact, r: RemoteFile) -> Change | None:
    """The change one artifact needs on a node, or None when it is there as it should be."""
    if not r.exists:
        return Change("create", a.path, f"{len(a.data)} bytes")
    if r.kind != "file":
        return Change("update", a.path, f"replace a {r.kind}")
    if r.sha256 != a.sha256:
        return Change("update", a.path, f"sha256 {(r.sha256 or '?')[:12]} -> {a.sha256[:12]}")
    wrong = []
    if r.mode is not None and r.mode != a.mode:
        wrong.append(f"mode {r.mode:o} -> {a.mode:o}")
    if (r.uid, r.gid) != (0, 0) and r.uid is not None:
        wrong.append(f"owner {r.uid}:{r.gid} -> 0:0")
    if wrong:
        return Change("fix-mode", a.path, ", ".join(wrong))
    return None


def plan_node(
    lay: Layout, arts: list[Artifact], remote: dict[str, RemoteFile], bundle_id: str, version: str
) -> NodePlan:
    """What must change on this node so that it holds `arts` and a venv built from bundle `bundle_id`."""
    plan = NodePlan(lay.node)
    want_venv = lay.venv_for(bundle_id)
    stamp = None
    for a in arts:
        if a.role == "stamp":
            stamp = a
            continue
        ch = file_change(a, remote.get(a.path, MISSING))
        if ch:
            plan.changes.append(ch)
            plan.uploads.append(a)
    for d in sorted({posixpath.dirname(a.path) for a in arts} | {posixpath.dirname(lay.venv)}):
        st = remote.get(d, MISSING)
        if st.exists and st.kind == "dir" and ((st.mode or 0) & 0o002 or st.uid not in (0, None)):
            plan.problems.append(
                f"{d} is {'writable by others' if (st.mode or 0) & 0o002 else 'not owned by root'}"
                f" (mode {st.mode:o}, owner {st.uid}): anyone could replace what runs as root; "
                "fix it first"
            )
    link = remote.get(lay.venv, MISSING)
    complete = remote.get(posixpath.join(want_venv, COMPLETE), MISSING)
    if link.exists and link.kind != "link":
        plan.problems.append(f"{lay.venv} is a {link.kind}, not a link slurmkit manages; move it away first")
    built = complete.exists and complete.sha256 is not None
    if not built:
        plan.build_venv = want_venv
        pl = [a for a in arts if a.role == "payload"]
        how = (
            f"unpacked from the prebuilt venv ({len(pl[0].data)} bytes)"
            if pl
            else f"from {sum(a.role == 'wheel' for a in arts) - 1} wheels"
        )
        plan.changes.append(Change("build-venv", want_venv, f"slurmkit {version} {how}"))
    if not (link.exists and link.link in (want_venv, posixpath.basename(want_venv))):
        plan.switch_venv = want_venv
        plan.changes.append(Change("switch-venv", lay.venv, f"{link.link or '(none)'} -> {want_venv}"))
    if stamp is not None:
        ch = file_change(stamp, remote.get(stamp.path, MISSING))
        if ch or plan.changes:
            if ch:
                plan.changes.append(ch)
            plan.uploads.append(stamp)
    return plan


# -- rollback ---------------------------------------------------------------------------------------------------


def parse_stamp(data: bytes | None) -> dict | None:
    if not data:
        return None
    try:
        doc = json.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        return None
    return doc


class RollbackPlan(Record, kw_only=False):
    node: str
    target: dict | None = None  # the stamp the node goes back to
    swaps: list[str] = field(default_factory=list)  # paths whose .slurmkit-prev is the wanted version
    venv: str | None = None  # venv dir the link must point to
    swap_stamp: bool = False  # the stamp goes back too (a real rollback, not a repair)
    changes: list[Change] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    note: str = ""


def _matches(stamp: dict, remote: dict[str, RemoteFile]) -> bool:
    return all(remote.get(p, MISSING).sha256 == h for p, h in stamp["files"].items())


def plan_rollback(
    lay: Layout, current: dict | None, previous: dict | None, remote: dict[str, RemoteFile]
) -> RollbackPlan:
    """Go back to the previous install; or, when the last install stopped half way (files no longer match the
    stamp), back to what the stamp records. `remote` has every path of both stamps and its PREV twin."""
    rb = RollbackPlan(lay.node)
    if current is not None and not _matches(current, remote):
        rb.target, rb.note = current, "files differ from the stamp (an install stopped half way): restoring it"
    elif previous is not None:
        rb.target, rb.swap_stamp, rb.note = (
            previous,
            True,
            f"back to slurmkit {previous.get('slurmkit_version', '?')} (bundle {previous.get('bundle', '?')})",
        )
    else:
        rb.note = "nothing to roll back: no previous install is recorded"
        return rb
    for path, want in sorted(rb.target["files"].items()):
        cur = remote.get(path, MISSING)
        if cur.sha256 == want:
            continue
        prev = remote.get(path + PREV, MISSING)
        if prev.sha256 == want:
            rb.swaps.append(path)
            rb.changes.append(Change("restore", path, f"sha256 {(cur.sha256 or '-')[:12]} -> {want[:12]}"))
        else:
            rb.problems.append(f"{path}: the version to restore ({want[:12]}) is not kept on the node")
    venv = rb.target.get("venv")
    link = remote.get(lay.venv, MISSING)
    if venv and link.link not in (venv, posixpath.basename(venv)):
        if remote.get(posixpath.join(venv, COMPLETE), MISSING).exists:
            rb.venv = venv
            rb.changes.append(Change("switch-venv", lay.venv, f"{link.link or '(none)'} -> {venv}"))
        else:
            rb.problems.append(f"{venv}: the venv to restore is gone")
    if rb.swap_stamp:
        rb.changes.append(Change("restore", lay.stamp, "the version stamp"))
    return rb
