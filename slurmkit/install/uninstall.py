"""`slurmkit install --uninstall`: take off a node everything `install` (and the hooks it installed) put there.

What goes, per node (each path as `install.*` and `{node}` make it, under `install.root`):
  the prolog, epilog and health script, the site config, the version stamp and the agent's systemd unit, each
  with its `.slurmkit-prev` twin and any staged `.NAME.slurmkit-tmp-*` leftover; the venv link and its
  `.slurmkit-prev`; every `venv-*` beside it; the wheel directory; the runtime directory (`install.run_dir`, the
  agent's socket; the settings file beside the config); the node's own files in `paths.state_dir` (`*-<node>.json`,
  `*-<node>.lock`: the directory may be shared); the hook wrappers at `install.slurm_prolog`/`slurm_epilog` when
  they are exactly what `--hook-wrapper` prints; with `remove_logs`, the node's health log files (`<node>.jsonl`
  and its rotations; never a single shared file). Then every directory that is left empty, up to the per-node
  root. Where systemd runs the node (and the root is the node's own `/`), the agent is stopped and disabled
  first and systemd reloaded after.

Planning is pure (`plan_uninstall` over what `gather` read); `run_uninstall` is the edge. A rerun finds nothing
and changes nothing.
"""

from __future__ import annotations

import posixpath
import re
from ..record import Record, field

from ..nodesettings import settings_path
from .layout import PREV, Layout
from .plan import Change, RemoteFile

MISSING = RemoteFile("", False)
TMP_MARK = ".slurmkit-tmp-"
STATE_EXT = (".json", ".lock")


class NodeView(Record, frozen=True, kw_only=False):
    """What uninstall needs to know about one node: its paths and what it holds (read by `gather`)."""

    lay: Layout
    run_dir: str
    state_dir: str
    health_log: str  # a directory (per-node files) or one shared file
    wrappers: dict[str, str]  # slurm.conf path -> the wrapper text `--hook-wrapper` prints for it
    remote: dict[str, RemoteFile]  # every candidate path, stat'ed (+ sha256 for files)
    listings: dict[str, list[str]]  # directory -> the names in it
    wrapper_text: dict[str, str] = field(default_factory=dict)  # wrapper path -> its content on the node
    systemd: bool = False  # the node runs systemd (/run/systemd/system) and the root is its own /


class UninstallPlan(Record, kw_only=False):
    node: str
    changes: list[Change] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # rm -f
    last: list[str] = field(default_factory=list)  # rm -f after everything else: the version stamp
    trees: list[str] = field(default_factory=list)  # rm -rf
    dirs: list[str] = field(default_factory=list)  # rmdir when empty, deepest first
    stop_unit: str | None = None  # systemctl disable --now
    kept: list[str] = field(default_factory=list)  # what stays, and why (logs unless asked)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def owned_files(lay: Layout) -> list[str]:
    """The single files `install` writes on a node (without their PREV twins)."""
    mark = posixpath.join(posixpath.dirname(lay.stamp), "rolled-back.json")  # pin.NAME: a rollback's mark
    return [
        p
        for p in (
            lay.prolog,
            lay.epilog,
            lay.health,
            lay.config,
            settings_path(lay.config),
            lay.agent_unit,
            mark,
            lay.stamp,
        )
        if p
    ]


def owned_dirs(lay: Layout, run_dir: str) -> list[str]:
    """The directories `install` made for its files (removed when empty; wheel_dir and run_dir as trees)."""
    return sorted({posixpath.dirname(p) for p in owned_files(lay)} | {posixpath.dirname(lay.venv), run_dir})


def is_dir_log(path: str) -> bool:
    from ..healthlog import SINGLE_FILE_SUFFIXES

    return path.endswith("/") or not path.lower().endswith(SINGLE_FILE_SUFFIXES)


def state_name(name: str, node: str) -> bool:
    """A per-node mark in paths.state_dir: `<what>-<node>.json` / `.lock` (xid-, drain-, pending-drain-, ...)."""
    return bool(re.fullmatch(r"[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*-" + re.escape(node) + r"\.(?:json|lock)", name))


def log_name(name: str, node: str) -> bool:
    """The node's health log and its rotations: `<node>.jsonl`, `<node>.jsonl.1`, ..."""
    return bool(re.fullmatch(re.escape(node) + r"\.jsonl(?:\.[0-9]+)?", name))


def candidates(lay: Layout, run_dir: str, state_dir: str, health_log: str, wrappers: dict[str, str]) -> list[str]:
    """Every path to stat before planning."""
    files = owned_files(lay)
    return [
        *files,
        *(p + PREV for p in files),
        lay.venv,
        lay.venv + PREV,
        lay.wheel_dir,
        run_dir,
        *owned_dirs(lay, run_dir),
        state_dir,
        health_log.rstrip("/") or "/",
        *wrappers,
    ]


def listing_dirs(lay: Layout, run_dir: str, state_dir: str, health_log: str) -> list[str]:
    """The directories whose names are listed: staged leftovers, venv-*, state and log files."""
    out = [*owned_dirs(lay, run_dir), state_dir]
    if is_dir_log(health_log):
        out.append(health_log.rstrip("/"))
    return sorted(set(out))


def _exists(v: NodeView, p: str) -> bool:
    return v.remote.get(p, MISSING).exists


def plan_uninstall(v: NodeView, *, remove_logs: bool = False, per_node_root: bool = False) -> UninstallPlan:
    lay = v.lay
    pl = UninstallPlan(lay.node)

    def rm(path: str, why: str, tree: bool = False) -> None:
        (pl.trees if tree else pl.files).append(path)
        pl.changes.append(Change("remove", path, why))

    if lay.agent_unit and _exists(v, lay.agent_unit):
        if v.systemd:
            pl.stop_unit = posixpath.basename(lay.agent_unit)
            pl.changes.append(Change("stop-agent", lay.agent_unit, f"systemctl disable --now {pl.stop_unit}"))
        else:
            pl.notes.append(
                "no systemd on the node (or a per-node root): the agent unit file is removed, no unit stopped"
            )
    for p in owned_files(lay):
        if p == lay.stamp:
            continue  # last: see run_uninstall
        for q in (p, p + PREV):
            if _exists(v, q):
                rm(q, "installed file" if q == p else "kept previous version")
    for d in owned_dirs(lay, v.run_dir):
        for name in v.listings.get(d, []):
            if name.startswith(".") and TMP_MARK in name:
                rm(posixpath.join(d, name), "staged copy left by an interrupted install")
    vdir, vbase = posixpath.dirname(lay.venv), posixpath.basename(lay.venv)
    for q in (lay.venv, lay.venv + PREV):
        if _exists(v, q):
            rm(q, "venv link")
    for name in sorted(v.listings.get(vdir, [])):
        if name.startswith(vbase + "-") and "/" not in name and TMP_MARK not in name:
            rm(posixpath.join(vdir, name), "venv", tree=True)
    if _exists(v, lay.wheel_dir):
        rm(lay.wheel_dir, "wheels / prebuilt venv tarball", tree=True)
    if _exists(v, v.run_dir):
        rm(v.run_dir, "runtime directory (agent socket)", tree=True)
    for name in sorted(v.listings.get(v.state_dir, [])):
        if state_name(name, lay.node):
            rm(posixpath.join(v.state_dir, name), "this node's state in paths.state_dir")
    if is_dir_log(v.health_log):
        d = v.health_log.rstrip("/")
        logs = [posixpath.join(d, n) for n in sorted(v.listings.get(d, [])) if log_name(n, lay.node)]
        if remove_logs:
            for p in logs:
                rm(p, "health log (--remove-logs)")
        elif logs:
            pl.kept += [f"{p} (health log; --remove-logs removes it)" for p in logs]
    elif _exists(v, v.health_log):
        pl.kept.append(f"{v.health_log} (one health log shared by every node: never removed)")
    for path, want in sorted(v.wrappers.items()):
        if not _exists(v, path):
            continue
        if v.wrapper_text.get(path) == want:
            rm(path, "hook wrapper from --hook-wrapper")
        else:
            pl.kept.append(f"{path} (slurm.conf's hook path, not the wrapper --hook-wrapper prints: the site's own)")
    if _exists(v, lay.stamp) or _exists(v, lay.stamp + PREV):
        for q in (lay.stamp + PREV, lay.stamp):
            if _exists(v, q):
                pl.last.append(q)
                pl.changes.append(Change("remove", q, "version stamp (last)"))
    dirs = set(owned_dirs(lay, v.run_dir)) | {v.state_dir}
    if is_dir_log(v.health_log):
        dirs.add(v.health_log.rstrip("/"))
    for sub in ("efficiency", "sync-jobs"):  # the hooks' own subdirectories of state_dir, when empty
        dirs.add(posixpath.join(v.state_dir, sub))
    if pl.changes:
        root = lay.root.rstrip("/") if per_node_root else ""
        pl.dirs = sorted(removable_dirs(dirs, root), key=lambda d: (-d.count("/"), d))
    return pl


def removable_dirs(dirs: set[str], root: str) -> set[str]:
    """The directories rmdir may try (it removes only empty ones): each of `dirs` and its ancestors, as long as
    they are under the per-node `root` (then the root too), or down to the first component named *slurmkit*
    (/var/log/slurmkit/health -> it and /var/log/slurmkit; never /etc/systemd/system or /etc/slurm)."""
    out: set[str] = set()
    for d in dirs:
        d = posixpath.normpath(d)
        if root and (d == root or d.startswith(root + "/")):
            while d != root:
                out.add(d)
                d = posixpath.dirname(d)
            out.add(root)
            continue
        parts = d.split("/")
        first = next((i for i, c in enumerate(parts) if "slurmkit" in c), None)
        if first is None:
            continue
        for i in range(len(parts), first, -1):
            out.add("/".join(parts[:i]))
    return out


# -- the edge: reading and changing a node ----------------------------------------------------------------------


def listdir(t, d: str) -> list[str]:
    """The names in directory d on the node ([] when it is not there), NUL-separated: any name survives."""
    r = t.run(["find", d, "-mindepth", "1", "-maxdepth", "1", "-printf", "%f\\0"])
    if r.returncode != 0:
        return []
    return [n for n in r.stdout.split("\0") if n]


def gather_view(t, lay: Layout, run_dir: str, state_dir: str, health_log: str, wrappers: dict[str, str]) -> NodeView:
    remote = {p: t.stat(p) for p in dict.fromkeys(candidates(lay, run_dir, state_dir, health_log, wrappers))}
    dirs = listing_dirs(lay, run_dir, state_dir, health_log)
    listings = {d: listdir(t, d) for d in dirs if remote.get(d, MISSING).kind == "dir"}
    texts = {}
    for p in wrappers:
        if remote.get(p, MISSING).kind == "file":
            r = t.run(["cat", "--", p])
            texts[p] = r.stdout if r.returncode == 0 else ""
    systemd = lay.root in ("", "/") and t.stat("/run/systemd/system").kind == "dir"
    return NodeView(lay, run_dir, state_dir, health_log, wrappers, remote, listings, texts, systemd)


def run_uninstall(t, pl: UninstallPlan, timeout: float) -> None:
    """Stop the agent (systemd), remove the files, the trees, the stamp last, then the emptied directories."""
    from .ssh import NodeError

    if pl.stop_unit:
        r = t.run(["systemctl", "disable", "--now", pl.stop_unit], timeout=timeout)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()
            raise NodeError(f"systemctl disable --now {pl.stop_unit}: {last[-1] if last else r.returncode}")
    if pl.files:
        t.run(["rm", "-f", "--", *pl.files], timeout=timeout).check()
    if pl.trees:
        t.run(["rm", "-rf", "--", *pl.trees], timeout=timeout).check()
    if pl.last:
        t.run(["rm", "-f", "--", *pl.last], timeout=timeout).check()
    if pl.dirs:
        t.run(["rmdir", "--ignore-fail-on-non-empty", "--", *pl.dirs], timeout=timeout)  # only the empty ones
    if pl.stop_unit:
        t.run(["systemctl", "daemon-reload"], timeout=timeout)


class Options(Record, frozen=True, kw_only=False):
    """An uninstall run: `paths_for(node)` -> (paths.state_dir, paths.health_log) of that node's settings."""

    paths_for: object  # Callable[[str], tuple[str, str]]
    wrappers: dict[str, str] = field(default_factory=dict)
    remove_logs: bool = False
    per_node_root: bool = False


def uninstall_node(t, lay: Layout, job, res) -> None:
    """One node (push.run_node's branch for `--uninstall`): plan, then (unless a dry run) remove."""
    opts: Options = job.uninstall
    state_dir, health_log = opts.paths_for(lay.node)  # type: ignore[operator]
    view = gather_view(t, lay, lay.run_dir, state_dir, health_log, opts.wrappers)
    pl = plan_uninstall(view, remove_logs=opts.remove_logs, per_node_root=opts.per_node_root)
    res.changes = pl.changes
    res.note = "; ".join([*pl.notes, *(f"kept {k}" for k in pl.kept)])
    if not pl.changed:
        res.status = "unchanged"
        return
    if job.dry_run:
        res.status = "would-change"
        return
    run_uninstall(t, pl, job.install.command_timeout)
    res.status = "removed"
