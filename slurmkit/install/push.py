"""One node: read its state, plan, then stage -> verify -> commit; roll back; verify with `slurmkit check`.

Order on a node, so that a failure leaves the live files as they were and nothing half-written:
  1. stage: every changed file is uploaded under a temporary name next to its target (`.NAME.slurmkit-tmp-X`),
     created exclusively, mode set, owner root; then all staged files are hashed on the node (sha256sum) and
     compared with what was sent. Any failure removes every staged file.
  2. wheels (or the prebuilt venv's tarball) are committed (inert until a venv uses them), the venv is built in
     venv-<bundle> (a new directory: the live venv is untouched) and its import checked. With the prebuilt venv
     (install.prebuilt_venv, payload.py) the node's Python is probed first; where it fits, "built" is `tar -x`
     plus bin/python and pyvenv.cfg; where it does not, the node gets the wheels and builds as before.
  3. config and hooks are committed: `ln -f FILE FILE.slurmkit-prev` keeps the old version, then an atomic rename
     puts the new one in place (the path never disappears, a running prolog sees old or new, never half).
  4. the venv link is switched atomically (a new link renamed over the old one), the old target kept as
     venv.slurmkit-prev; the version stamp is written last.
"""

from __future__ import annotations

import posixpath
import secrets
import time
from collections.abc import Callable
from ..record import Record, field
from typing import TYPE_CHECKING

from . import pin
from .agentunit import ensure_agent
from .bundle import Artifact, Wheelhouse, artifacts
from .layout import COMPLETE, PREV, Layout
from .payload import IMPORT_CHECK as PAYLOAD_CHECK
from .payload import PROBE, Payload, PyId, parse_probe, pyvenv_cfg, venv_choice
from .plan import Change, NodePlan, RemoteFile, RollbackPlan, parse_sha256sum, parse_stamp, plan_node, plan_rollback
from .ssh import HostKeyRefused, NodeError, Transport
from .verify import verify, verify_reason  # noqa: F401 - verify_reason: re-exported for callers of push

if TYPE_CHECKING:
    from ..settings import AgentSettings, InstallSettings


class NodeResult(Record, kw_only=False):
    node: str
    status: str  # unchanged | changed | would-change | rolled-back | removed | held | failed | refused
    changes: list[Change] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    version: str | None = None  # slurmkit version in the node's stamp after the run
    verify: dict | None = None  # `slurmkit check --json` on the node
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status not in ("failed", "refused", "held") and (self.verify is None or self.verify["ok"])

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "status": self.status,
            "ok": self.ok,
            "changes": [c.to_dict() for c in self.changes],
            "error": self.error,
            "note": self.note,
            "version": self.version,
            "seconds": round(self.seconds, 3),
            "verify": self.verify,
        }


# -- reading a node ---------------------------------------------------------------------------------------------


def hash_files(t: Transport, paths: list[str]) -> dict[str, str]:
    if not paths:
        return {}
    r = t.run(["sha256sum", "--", *paths])
    got = parse_sha256sum(r.stdout)
    if r.returncode != 0 and not got:
        r.check()
    return got


def gather(t: Transport, paths: list[str]) -> dict[str, RemoteFile]:
    """stat every path (without following links) and hash the regular files, in one command."""
    st = {p: t.stat(p) for p in dict.fromkeys(paths)}
    hashes = hash_files(t, [p for p, s in st.items() if s.exists and s.kind == "file"])
    out = {}
    for p, s in st.items():
        out[p] = RemoteFile(p, s.exists, s.kind, hashes.get(p), s.mode, s.uid, s.gid, s.link)
    return out


def read_file(t: Transport, path: str) -> bytes | None:
    r = t.run(["cat", "--", path])
    return r.stdout.encode() if r.returncode == 0 else None


# -- changing a node --------------------------------------------------------------------------------------------


def _tmp(path: str, token: str) -> str:
    d, b = posixpath.split(path)
    return posixpath.join(d, f".{b}.slurmkit-tmp-{token}")


def _remove(t: Transport, paths: list[str]) -> None:
    if paths:
        try:
            t.run(["rm", "-f", "--", *paths])
        except NodeError:
            pass


def makedirs(t: Transport, path: str) -> None:
    """mkdir -p over the Transport (mode 0755), without a shell round trip per call."""
    todo = []
    p = path
    while p not in ("/", "") and not t.stat(p).exists:
        todo.append(p)
        p = posixpath.dirname(p)
    for d in reversed(todo):
        t.mkdir(d, 0o755)


def stage(t: Transport, arts: list[Artifact], token: str) -> dict[str, str]:
    """Upload each artifact under a temporary name; check the hashes on the node. Returns {path: tmp}.
    On any failure nothing staged is left behind."""
    staged: dict[str, str] = {}
    try:
        for a in arts:
            tmp = _tmp(a.path, token)
            staged[a.path] = tmp
            t.put(a.data, tmp, a.mode)
        if not arts:
            return staged
        if not t.is_root:
            t.run(["chown", "0:0", "--", *staged.values()]).check()
        got = hash_files(t, list(staged.values()))
        for a in arts:
            h = got.get(staged[a.path])
            if h != a.sha256:
                raise NodeError(f"{a.path}: staged copy has sha256 {h or '(none)'}, sent {a.sha256}")
    except BaseException:
        _remove(t, list(staged.values()))
        raise
    return staged


def commit(t: Transport, path: str, tmp: str, existed: bool) -> None:
    if existed:  # keep the old version, without a moment where `path` is missing
        t.run(["ln", "-f", "--", path, path + PREV]).check()
    t.rename(tmp, path)


def switch_link(t: Transport, link: str, target: str, current: str | None, token: str) -> None:
    """Point `link` at `target` atomically (a new link renamed over it); the old target is kept in link.PREV."""
    if current:
        tmp = _tmp(link + PREV, token)
        t.symlink(current, tmp)
        t.rename(tmp, link + PREV)
    tmp = _tmp(link, token)
    t.symlink(posixpath.basename(target), tmp)
    t.rename(tmp, link)


# what a new venv must import before it goes live (it prints the version it holds)
IMPORT_CHECK = "import slurmkit.cli, yaml, click; print(slurmkit.__version__)"

# Runs on the node as `python3 -c VENV_SCRIPT VDIR INSTALLER_WHEEL WHEEL...`: fixed code, paths as argv, one
# round trip for what would be three commands (create the venv, install the wheels, check the import).
VENV_SCRIPT = (
    f"""\
import os, subprocess, sys, venv
vdir, installer, wheels = sys.argv[1], sys.argv[2], sys.argv[3:]
venv.EnvBuilder(with_pip=False, symlinks=True).create(vdir)
py = os.path.join(vdir, "bin", "python")
steps = [([py, "-m", "installer", "--no-compile-bytecode", *wheels], dict(os.environ, PYTHONPATH=installer)),
         ([py, "-c", {IMPORT_CHECK!r}], None)]
"""
    + """\
for argv, env in steps:
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode:
        lines = (r.stderr or r.stdout).strip().splitlines()
        sys.exit(argv[2] + ": " + (lines[-1] if lines else "exit code %d" % r.returncode))
print(r.stdout.strip())
"""
)


def prune_venv(t: Transport, lay: Layout, old_prev: RemoteFile | None, keep) -> None:
    """Remove the venv the PREV link pointed to before this switch (now neither live nor kept for --rollback),
    so that a node holds at most two venvs. Only a sibling named venv-*: never anything else."""
    if not old_prev or not old_prev.exists or old_prev.kind != "link" or not old_prev.link:
        return
    name = posixpath.basename(old_prev.link)
    keep_names = {posixpath.basename(k) for k in keep if k}
    if name in keep_names or not name.startswith(posixpath.basename(lay.venv) + "-") or "/" in old_prev.link:
        return
    try:
        t.run(["rm", "-rf", "--", posixpath.join(posixpath.dirname(lay.venv), name)])
    except NodeError:
        pass  # disk hygiene only: never fail an install for it


def _new_venv(t: Transport, vdir: str, version: str, leftover: bool, fill) -> None:
    """fill() makes the venv in the new directory vdir and returns what its import check printed (slurmkit's
    version); then the venv is marked complete. Any failure removes vdir (the live venv is another directory)."""
    try:
        if leftover:  # a half-made one from an interrupted run
            t.run(["rm", "-rf", "--", vdir]).check()
        printed = fill().strip()
        if printed != version:
            raise NodeError(f"{vdir}: slurmkit {printed!r} imports, expected {version}")
        t.put((posixpath.basename(vdir) + "\n").encode(), posixpath.join(vdir, COMPLETE), 0o644)
    except BaseException:
        try:
            t.run(["rm", "-rf", "--", vdir])
        except NodeError:
            pass
        raise


def build_venv(
    t: Transport, lay: Layout, wh: Wheelhouse, vdir: str, python: str, timeout: float, leftover: bool
) -> None:
    """A new venv at vdir from the wheels (pypa/installer run from its own wheel: no pip, no index).
    Bytecode: the import check compiles what the CLI imports; the rest compiles on first use (as root)."""
    wheels = [f"{lay.wheel_dir}/{w.name}" for w in wh.to_install]
    _new_venv(
        t,
        vdir,
        wh.version,
        leftover,
        lambda: (
            t.run([python, "-c", VENV_SCRIPT, vdir, f"{lay.wheel_dir}/{wh.installer.name}", *wheels], timeout=timeout)
            .check()
            .stdout
        ),
    )


def probe_python(t: Transport, python: str, timeout: float) -> PyId:
    """The node's interpreter, as the prebuilt venv needs to know it (payload.PROBE, ~20 ms on the node)."""
    r = t.run([python, "-I", "-c", PROBE], timeout=timeout).check()
    try:
        return parse_probe(r.stdout)
    except ValueError as e:
        raise NodeError(f"{python} on the node: {e}") from None


def unpack_venv(
    t: Transport, lay: Layout, pl: Payload, node_py: PyId, version: str, vdir: str, timeout: float, leftover: bool
) -> None:
    """A new venv at vdir from the prebuilt tarball (committed at lay.payload, its sha256 checked when staged):
    `tar -x`, then what is the node's own (bin/python, pyvenv.cfg), then an import check of what could still
    fail on this node (the binary modules, slurmkit itself): 50 ms, not the CLI's 100 (`--verify` runs it all)."""

    def fill() -> str:
        t.mkdir(vdir, 0o755)
        t.run(["tar", "-xzf", lay.payload, "-C", vdir], timeout=timeout).check()
        t.symlink(node_py.base_executable, posixpath.join(vdir, "bin", "python"))
        t.put(pyvenv_cfg(node_py), posixpath.join(vdir, "pyvenv.cfg"), 0o644)
        return (
            t.run([posixpath.join(vdir, "bin", "python"), "-c", PAYLOAD_CHECK, *pl.binary_modules], timeout=timeout)
            .check()
            .stdout
        )

    _new_venv(t, vdir, version, leftover, fill)


def apply(
    t: Transport,
    lay: Layout,
    plan: NodePlan,
    wh: Wheelhouse,
    remote: dict[str, RemoteFile],
    install,
    payload: Payload | None = None,
    node_py: PyId | None = None,
) -> None:
    """payload, node_py: the prebuilt venv and the node's interpreter it fits (else the venv is built from the
    wheels)."""
    if plan.problems:
        raise NodeError("; ".join(plan.problems))
    token = secrets.token_hex(4)
    dirs = sorted({posixpath.dirname(a.path) for a in plan.uploads} | {posixpath.dirname(lay.venv)})
    for d in dirs:
        if not remote.get(d, RemoteFile(d, False)).exists:
            makedirs(t, d)
    staged = stage(t, plan.uploads, token)  # the stamp too (staged now, committed last)
    left = dict(staged)
    inert = ("wheel", "payload")  # committed first: nothing runs them until the venv is built
    order = ([a for a in plan.uploads if a.role in inert], [a for a in plan.uploads if a.role not in (*inert, "stamp")])
    try:
        for a in order[0]:
            commit(t, a.path, staged[a.path], remote[a.path].exists)
            del left[a.path]
        leftover = remote.get(plan.build_venv or "", RemoteFile("", False)).exists
        if plan.build_venv and payload is not None and node_py is not None:
            unpack_venv(t, lay, payload, node_py, wh.version, plan.build_venv, install.command_timeout, leftover)
        elif plan.build_venv:
            build_venv(t, lay, wh, plan.build_venv, install.python, install.command_timeout, leftover)
        for a in order[1]:
            commit(t, a.path, staged[a.path], remote[a.path].exists)
            del left[a.path]
        if plan.switch_venv:
            link = remote[lay.venv]
            switch_link(t, lay.venv, plan.switch_venv, link.link if link.exists else None, token)
            prune_venv(t, lay, remote.get(lay.venv + PREV), keep=(plan.switch_venv, link.link))
        for a in plan.uploads:
            if a.role == "stamp":  # last: the stamp says what is installed only once it is
                commit(t, a.path, staged[a.path], remote[a.path].exists)
                del left[a.path]
    except BaseException:
        _remove(t, list(left.values()))
        raise


def swap(t: Transport, path: str, token: str) -> None:
    """path <-> path.slurmkit-prev, with `path` present all along."""
    tmp = _tmp(path, token)
    t.run(["ln", "-f", "--", path, tmp]).check()
    t.rename(path + PREV, path)
    t.rename(tmp, path + PREV)


def rollback(t: Transport, lay: Layout, rb: RollbackPlan, remote: dict[str, RemoteFile]) -> None:
    if rb.problems:
        raise NodeError("; ".join(rb.problems))
    token = secrets.token_hex(4)
    for path in rb.swaps:
        swap(t, path, token)
    if rb.venv:
        link = remote.get(lay.venv)
        switch_link(t, lay.venv, rb.venv, link.link if link and link.exists else None, token)
    if rb.swap_stamp:
        swap(t, lay.stamp, token)


# -- the whole job for one node ---------------------------------------------------------------------------------


class Job(Record, kw_only=False):
    """What every node gets; `connect(node) -> Transport` is the edge (paramiko, or a local stand-in)."""

    install: InstallSettings
    wheelhouse: Wheelhouse | None  # None for a rollback
    prolog: bytes
    epilog: bytes
    site_config: bytes
    connect: Callable[[str], Transport]
    health: bytes = b""
    payload: Payload | None = None  # the prebuilt venv (install.prebuilt_venv); None: every node builds its own
    dry_run: bool = False
    do_verify: bool = False
    do_rollback: bool = False
    uninstall: object | None = None  # uninstall.Options: take everything off the node instead
    configs: dict[str, bytes] | None = None  # node -> its own config (site overrides); None: site_config for all
    forward: bool = False  # install over a rollback's mark (pin.py): the admin moves the node forward on purpose
    agent: AgentSettings | None = None  # the site's agent section (agentunit.py); None: the agent is off


def run_node(node: str, job: Job) -> NodeResult:
    from .layout import layout

    start = time.monotonic()
    res = NodeResult(node, "failed")
    t = None
    try:
        t = job.connect(node)
        lay = layout(job.install, node, job.agent)
        if job.uninstall is not None:
            from .uninstall import uninstall_node

            uninstall_node(t, lay, job, res)
        elif job.do_rollback:
            _rollback_node(t, lay, job, res)
        else:
            _install_node(t, lay, job, res)
            ensure_agent(t, lay, res, job.dry_run, job.install.command_timeout)
        if job.do_verify and not job.dry_run and res.status != "failed":
            res.verify = verify(t, lay, job.install.verify_timeout)
            if not res.verify["ok"]:
                res.error = f"verify (exit {res.verify['returncode']}): {res.verify['why']}"
    except HostKeyRefused as e:
        res.status, res.error = "refused", str(e)
    except pin.Held as e:
        res.status, res.error = "held", str(e)
    except NodeError as e:
        res.status, res.error = "failed", str(e)
    except Exception as e:  # noqa: BLE001 - one broken node never stops the others; the report says what happened
        res.status, res.error = "failed", f"{type(e).__name__}: {e}"
    finally:
        if t is not None:
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing a broken transport: the result already says why
                pass
        res.seconds = time.monotonic() - start
    return res


def _plan(t: Transport, lay: Layout, job: Job, pl: Payload | None) -> tuple[list[Artifact], dict, NodePlan]:
    wh = job.wheelhouse
    assert wh is not None  # an install (not a rollback) always has its bundle
    bundle_id = wh.bundle_id
    cfg = job.configs[lay.node] if job.configs is not None else job.site_config
    arts = artifacts(lay, wh, job.prolog, job.epilog, cfg, job.health, payload=pl, bundle_id=bundle_id)
    venv = lay.venv_for(bundle_id)
    dirs = sorted({posixpath.dirname(a.path) for a in arts} | {posixpath.dirname(lay.venv)})
    remote = gather(
        t, [a.path for a in arts] + [lay.venv, lay.venv + PREV, venv, posixpath.join(venv, COMPLETE), *dirs]
    )
    return arts, remote, plan_node(lay, arts, remote, bundle_id, wh.version)


def _install_node(t: Transport, lay: Layout, job: Job, res: NodeResult) -> None:
    wh = job.wheelhouse
    assert wh is not None  # an install (not a rollback) always has its bundle
    arts, remote, plan = _plan(t, lay, job, job.payload)
    node_py = None
    if plan.build_venv or (job.payload is not None and plan.changed):
        # the node's Python decides: the prebuilt venv where it fits, else the wheels where they fit, else refused
        node_py = probe_python(t, job.install.python, job.install.command_timeout)
        try:
            fits, res.note = venv_choice(job.payload, wh.to_install, node_py)
        except ValueError as e:
            raise NodeError(str(e)) from None
        if not fits:
            arts, remote, plan = _plan(t, lay, job, None) if job.payload is not None else (arts, remote, plan)
            node_py = None
    res.changes = plan.changes
    if plan.problems:
        raise NodeError("; ".join(plan.problems))
    mark = pin.parse(read_file(t, pin.path(lay)))
    if mark is not None and plan.changed and not job.forward:
        raise pin.Held(pin.refusal(mark))
    if not plan.changed:
        res.status, res.version = "unchanged", wh.version
        return
    if job.dry_run:
        res.status = "would-change"
        return
    apply(t, lay, plan, wh, remote, job.install, job.payload if node_py else None, node_py)
    if mark is not None:
        pin.clear(t, lay)
    res.status, res.version = "changed", wh.version


def _rollback_node(t: Transport, lay: Layout, job: Job, res: NodeResult) -> None:
    current = parse_stamp(read_file(t, lay.stamp))
    previous = parse_stamp(read_file(t, lay.stamp + PREV))
    paths = [lay.venv]
    for s in (current, previous):
        if s:
            for p in s["files"]:
                paths += [p, p + PREV]
            if s.get("venv"):
                paths.append(posixpath.join(s["venv"], COMPLETE))
    remote = gather(t, paths)
    rb = plan_rollback(lay, current, previous, remote)
    res.changes, res.note = rb.changes, rb.note
    if rb.problems:
        raise NodeError("; ".join(rb.problems))
    if rb.target is None or not rb.changes:
        res.status = "unchanged"
        res.version = (current or {}).get("slurmkit_version")
        return
    if job.dry_run:
        res.status = "would-change"
        return
    rollback(t, lay, rb, remote)
    if rb.swap_stamp:  # a real rollback (not the repair of a half install): it holds until --forward
        pin.write(t, lay, pin.text(rb.target, current))
    res.status, res.version = "rolled-back", rb.target.get("slurmkit_version")
