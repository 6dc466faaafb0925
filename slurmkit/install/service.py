"""An install (or rollback) of a set of nodes, end to end: which nodes, what they get, the fan-out, the slurm.conf
advice and the report. `slurmkit install` is a thin layer over `install()`; the Python API can call it as is.

    report = install(settings, ["gpu001", "gpu002"], dry_run=True)
    report.ok, report.to_dict()            # the JSON `slurmkit install --json` prints
"""

from __future__ import annotations

import functools
import posixpath
import shlex
import time
from collections.abc import Callable
from ..record import Record, field
from pathlib import Path

from ..errors import CommandError, SlurmkitError, UsageError


def target_nodes(nodelist: str | None, partition: str | None, backend_nodes: Callable[[], list]) -> list[str]:
    """The nodes of a hostlist and/or of a Slurm partition (its records from `backend_nodes()`), each once."""
    from ..slurm import expand_hostlist

    nodes: list[str] = []
    if nodelist:
        nodes += expand_hostlist(nodelist)
    if partition:
        part = [r.name for r in backend_nodes() if partition in (r.partitions or [])]
        if not part:
            raise UsageError(f"--from-slurm: partition {partition!r} has no nodes")
        nodes += part
    nodes = list(dict.fromkeys(nodes))
    if not nodes:
        raise UsageError("no nodes: give --nodes HOSTLIST and/or --from-slurm PARTITION")
    return nodes


class Bundle(Record, kw_only=False):
    """What every node gets: the hook scripts, the site config, the wheelhouse and (optionally) the prebuilt venv.
    Empty for a rollback, which puts back what each node had."""

    prolog: bytes = b""
    epilog: bytes = b""
    health: bytes = b""
    site_config: bytes = b""
    wheelhouse: object | None = None  # bundle.Wheelhouse
    payload: object | None = None  # payload.Payload


def prepare(settings, say: Callable[[str], None] = lambda m: None) -> Bundle:
    from . import bundle

    inst = settings.install
    psrc, esrc, hsrc = bundle.hook_sources(inst)
    if inst.site_config_src and "{node}" in inst.site_config_src:
        raise UsageError(
            "install.site_config_src: {node} is not expanded (one site config for all nodes); give the nodes that "
            "differ their settings with `overrides:` in it (docs/config.md), and install writes each node its own"
        )
    cfg = inst.site_config_src or settings.source
    if not cfg:
        raise UsageError("no site config to push: give --config FILE (or set install.site_config_src)")
    try:
        site_config = Path(cfg).expanduser().read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read the site config to push: {e.strerror}", path=str(cfg)) from None
    wh = bundle.wheelhouse(inst, say=say)
    say(f"bundle {wh.bundle_id}: slurmkit {wh.version}, {len(wh.wheels)} wheels from {wh.directory}")
    pl = None
    if inst.prebuilt_venv:
        from . import payload

        pl = payload.build(wh, bundle.cache_root(), say=say)
        say(f"prebuilt venv for {pl.python.describe()}: {len(pl.data)} bytes from {pl.path}")
    return Bundle(psrc.read_bytes(), esrc.read_bytes(), hsrc.read_bytes(), site_config, wh, pl)


class Report(Record, kw_only=False):
    """One install or rollback: every node's result, the retry line, the slurm.conf advice."""

    results: list
    bundle: Bundle
    dry_run: bool
    rollback: bool
    seconds: float
    parallel: int
    waves: int
    retry: dict
    slurm_conf: dict | None
    by_status: dict[str, int] = field(default_factory=dict)
    uninstall: bool = False

    @property
    def failed(self) -> list:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict:
        wh, pl = self.bundle.wheelhouse, self.bundle.payload
        return {
            "ok": self.ok,
            "dry_run": self.dry_run,
            "rollback": self.rollback,
            "uninstall": self.uninstall,
            "bundle": {
                "id": wh.bundle_id,  # type: ignore[attr-defined]
                "slurmkit_version": wh.version,  # type: ignore[attr-defined]
                "prebuilt_venv": {
                    "sha256": pl.sha256,  # type: ignore[attr-defined]
                    "bytes": len(pl.data),  # type: ignore[attr-defined]
                    "python": pl.python.describe(),  # type: ignore[attr-defined]
                }
                if pl
                else None,
            }
            if wh
            else None,
            "summary": {
                "nodes": len(self.results),
                "ok": len(self.results) - len(self.failed),
                "failed": len(self.failed),
                "by_status": self.by_status,
                "failed_nodes": self.retry["hostlist"],
                "retry": self.retry["command"],
                "seconds": round(self.seconds, 2),
                "parallel": self.parallel,
                "waves": self.waves,
            },
            "nodes": [r.to_dict() for r in self.results],
            "slurm_conf": self.slurm_conf,
        }


def install(
    settings,
    nodes: list[str],
    *,
    dry_run: bool = False,
    rollback: bool = False,
    verify: bool = False,
    accept_new_host_keys: bool = False,
    parallel: int | None = None,
    progress: bool | None = None,
    config_arg: str | None = None,
    uninstall: bool = False,
    remove_logs: bool = False,
    force: bool = False,
    forward: bool = False,
    say: Callable[[str], None] = lambda m: None,
    warn: Callable[[str], None] = lambda m: None,
) -> Report:
    """Install (or roll back, or uninstall) `nodes`, `parallel` at a time; every failure is a node's result, never
    an exception. An uninstall is refused (SlurmkitError) while slurm.conf still names the hooks, unless `force`."""
    from . import fanout, ssh
    from .layout import layout
    from .push import Job, run_node

    inst = settings.install
    uopts, conf = None, None
    if uninstall:
        from . import uninstall as un

        conf = slurm_conf_removal(settings, nodes[0])
        if not dry_run and not force:
            if conf["error"]:
                raise SlurmkitError(
                    f"{conf['error']}: cannot tell whether slurm.conf still names the hooks (a node without them "
                    "would fail every job's prolog); check it, then rerun with --force"
                )
            if conf["still_configured"]:
                raise SlurmkitError(
                    "slurm.conf still names slurmkit's hooks ("
                    + ", ".join(conf["still_configured"])
                    + "): without them every job's prolog fails. Take these lines out (on the controller and every "
                    "node), `scontrol reconfigure`, then uninstall"
                )
        per_node = "{node}" in inst.root
        uopts = un.Options(
            paths_for=functools.partial(node_paths, settings, nodes),
            wrappers=wrappers(settings),
            remove_logs=remove_logs,
            per_node_root=per_node,
        )
    b = Bundle() if rollback or uninstall else prepare(settings, say)
    node_configs = None
    if not (rollback or uninstall):
        node_configs = per_node_configs(settings, b.site_config, nodes)
    connect = functools.partial(ssh.connect, install=inst, accept_new=accept_new_host_keys, say=warn)
    job = Job(
        inst,
        b.wheelhouse,  # type: ignore[arg-type]
        b.prolog,
        b.epilog,
        b.site_config,
        connect,
        dry_run=dry_run,
        do_verify=verify,
        do_rollback=rollback,
        health=b.health,
        payload=b.payload,  # type: ignore[arg-type]
        uninstall=uopts,
        configs=node_configs,
        forward=forward,
        agent=settings.agent,
    )
    width = parallel or inst.parallel
    waves = -(-len(nodes) // width)
    if len(nodes) > width:
        say(f"{len(nodes)} nodes, {width} at a time: {waves} waves")
    t0 = time.monotonic()
    label = "uninstall" if uninstall else "rollback" if rollback else "install"
    results = fanout.fan_out(nodes, lambda n: run_node(n, job), width, progress=progress, label=label)
    if not (rollback or uninstall):
        conf = slurm_conf_advice(settings, layout(inst, nodes[0]))
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    failed = [r.node for r in results if not r.ok]
    retry = retry_command(
        failed,
        config_arg,
        rollback=rollback,
        dry_run=dry_run,
        verify=verify,
        uninstall=uninstall,
        force=force,
        forward=forward,
    )
    return Report(results, b, dry_run, rollback, time.monotonic() - t0, width, waves, retry, conf, counts, uninstall)


def per_node_configs(settings, site_bytes: bytes, nodes: list[str]) -> dict[str, bytes] | None:
    """Each node's config when the site config has `overrides:` (None: every node gets the site config as is)."""
    from . import nodeconfig

    src = settings.install.site_config_src
    if src:
        from .. import config

        site = config.load(str(Path(src).expanduser()))
    else:
        site = settings
    if not site.overrides:
        return None
    return nodeconfig.configs(site, site_bytes, nodes, nodeconfig.features_for(site, nodes))


def node_paths(settings, nodes: list[str], node: str) -> tuple[str, str]:
    """(paths.state_dir, paths.health_log) as `node` has them (its overrides applied)."""
    if not settings.overrides:
        return settings.paths.state_dir, settings.paths.health_log
    from ..settings.overrides import merge
    from .nodeconfig import features_for

    merged, _ = merge(settings, node, features_for(settings, [node])[node])
    return merged.paths.state_dir, merged.paths.health_log


def wrappers(settings) -> dict[str, str]:
    """slurm.conf's hook paths (install.slurm_prolog/slurm_epilog) -> the wrapper `--hook-wrapper` prints for
    each: what uninstall removes where the file is exactly that."""
    from .layout import layout
    from .slurmconf import wrapper_script

    inst = settings.install
    lay = layout(inst, "{node}")
    out = {}
    for which, path, hook in (
        ("prolog", inst.slurm_prolog, lay.prolog),
        ("epilog", inst.slurm_epilog, lay.epilog),
        ("health", inst.slurm_health, lay.health),
    ):
        if path:
            out[path] = wrapper_script(which, hook)
    return out


def slurm_conf_removal(settings, node: str) -> dict:
    """The slurm.conf lines that name what uninstall removes (Prolog=, Epilog=, HealthCheckProgram= of ours), and
    which of them the running cluster still has (`scontrol show config`)."""
    from . import slurmconf
    from .layout import layout

    inst = settings.install
    lay = layout(inst, "{node}" if "{node}" in inst.root else node)
    ours = {
        "Prolog": inst.slurm_prolog or lay.prolog,
        "Epilog": inst.slurm_epilog or lay.epilog,
        "HealthCheckProgram": inst.slurm_health or lay.health,
    }
    out: dict = {
        "remove": [f"{k}={v}" for k, v in ours.items()],
        "also": "HealthCheckInterval=/HealthCheckNodeState= go with HealthCheckProgram=; PrologFlags=Alloc, "
        "PrologEpilogTimeout= and nohold_on_prolog_fail may stay",
        "still_configured": [],
        "error": None,
    }
    try:
        have = slurmconf.cluster_config(settings)
    except (CommandError, SlurmkitError) as e:
        out["error"] = f"cannot read the cluster's config (scontrol show config): {e}"
        return out
    for k, v in ours.items():
        if v in (slurmconf.scripts(have, k) if k in ("Prolog", "Epilog") else [have.get(k)]):
            out["still_configured"].append(f"{k}={v}")
    return out


def retry_command(
    failed: list[str],
    config_arg: str | None,
    *,
    rollback: bool,
    dry_run: bool,
    verify: bool,
    uninstall: bool = False,
    force: bool = False,
    forward: bool = False,
) -> dict:
    """The failed nodes as one hostlist, and the command that runs the same install on them only (quoted to paste)."""
    from ..slurm import fold_hostlist

    if not failed:
        return {"hostlist": "", "command": None}
    hl = fold_hostlist(failed)
    argv = [
        "slurmkit",
        *(["--config", config_arg] if config_arg else []),
        "install",
        "--nodes",
        hl,
        *(["--rollback"] if rollback else []),
        *(["--uninstall"] if uninstall else []),
        *(["--force"] if force else []),
        *(["--forward"] if forward else []),
        *(["--dry-run"] if dry_run else []),
        *(["--verify"] if verify else []),
    ]
    return {"hostlist": hl, "command": " ".join(shlex.quote(a) for a in argv)}


def slurm_conf_advice(settings, lay) -> dict:
    """The slurm.conf advice: lines to paste (merged with the cluster's values), what is missing, and where."""
    from . import slurmconf

    inst = settings.install
    per_node = "{node}" in inst.root
    prolog, epilog = inst.slurm_prolog or lay.prolog, inst.slurm_epilog or lay.epilog
    # one slurm.conf names one path: a per-node root needs the health wrapper too (install.slurm_health)
    health = (inst.slurm_health or lay.health) if inst.health_check_interval else None
    lines = slurmconf.required_lines(
        prolog,
        epilog,
        inst.prolog_epilog_timeout,
        health=health,
        health_interval=inst.health_check_interval,
        health_state=inst.health_check_node_state,
    )
    out = {
        "lines": [ln.text for ln in lines],
        "missing": [],
        "error": None,
        "node": lay.node,
        "per_node": per_node,
        "wrapper_needed": per_node
        and not (inst.slurm_prolog and inst.slurm_epilog and (inst.slurm_health or not health)),
        "configless": None,
        # the hook agent's unit, installed with the hooks; systemd starts it once told to
        "agent_unit": lay.agent_unit or None,
        "agent_enabled": settings.agent.enabled,  # install itself enables and starts it (agentunit.py)
        "agent_enable": f"systemctl daemon-reload && systemctl enable --now {posixpath.basename(lay.agent_unit)}"
        if lay.agent_unit
        else None,
    }
    try:
        have = slurmconf.cluster_config(settings)
    except (CommandError, SlurmkitError) as e:
        out["error"] = f"cannot read the cluster's config (scontrol show config): {e}"
        return out
    out["lines"] = [ln.text for ln in slurmconf.merged(lines, have)]
    out["configless"] = slurmconf.configless(have)
    out["missing"] = [{"line": ln.text, "have": h, "why": ln.why} for ln, h in slurmconf.missing(lines, have)]
    return out
