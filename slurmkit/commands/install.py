from __future__ import annotations

import functools
import posixpath
import time
from pathlib import Path

import click

from .ctx import Ctx, pass_ctx
from ..errors import CommandError, SlurmkitError, UsageError


@click.command()
@click.option("--nodes", "nodelist", metavar="HOSTLIST", help="Nodes to install to, a hostlist: 'gpu[001-128]'.")
@click.option("--from-slurm", "partition", metavar="PARTITION", help="Also every node of this Slurm partition.")
@click.option("--dry-run", is_flag=True, help="Print per node what would change; change nothing.")
@click.option("--parallel", type=click.IntRange(min=1), help="Nodes at a time (default: install.parallel, 16).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report (format: docs/install.md).")
@click.option("--rollback", is_flag=True, help="Put back what each node had before the last install.")
@click.option("--verify", "do_verify", is_flag=True, help="Then run `slurmkit check --json` on each node.")
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Accept (and record) host keys known_hosts does not have. A CHANGED key is always refused.",
)
@click.option(
    "--build-wheelhouse",
    "build_dir",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Only write the wheels the nodes get (slurmkit, its node packages, installer) into DIR, for "
    "install.wheelhouse at sites whose admin host has no package index later; then exit.",
)
@click.option(
    "--slurm-conf",
    "conf_only",
    is_flag=True,
    help="Only print the slurm.conf lines to paste (merged with the cluster's own values); no SSH.",
)
@click.option(
    "--hook-wrapper",
    type=click.Choice(["prolog", "epilog"]),
    help="Only print the wrapper script slurm.conf must name when install.root contains {node}.",
)
@pass_ctx
def install(
    ctx: Ctx,
    nodelist,
    partition,
    dry_run,
    parallel,
    as_json,
    rollback,
    do_verify,
    accept_new_host_keys,
    build_dir,
    conf_only,
    hook_wrapper,
):
    """Put the prolog, epilog, site config and slurmkit (a venv) on nodes over SSH: staged, hash-checked,
    renamed into place, previous version kept for --rollback. Exit 1 if any node failed."""
    from ..install import bundle, fanout, ssh
    from ..install.layout import layout
    from ..install.push import Job, run_node
    from ..slurm import expand_hostlist

    settings = ctx.settings
    inst = settings.install
    wh: bundle.Wheelhouse | None  # none for a rollback
    conf: dict | None  # slurm.conf advice; none for a rollback
    if build_dir:
        wh = bundle.wheelhouse(inst, say=ctx.say, build=True)
        for w in bundle.export_wheelhouse(wh, Path(build_dir)):
            click.echo(str(w))
        click.echo(
            f"slurmkit: wheelhouse for slurmkit {wh.version} in {build_dir}: set install.wheelhouse to it", err=True
        )
        return 0
    if hook_wrapper:
        from ..install.slurmconf import wrapper_script

        lay = layout(inst, "{node}")
        click.echo(wrapper_script(hook_wrapper, lay.prolog if hook_wrapper == "prolog" else lay.epilog), nl=False)
        return 0
    if conf_only:
        conf = _slurm_conf(settings, layout(inst, "{node}"), ctx)
        if conf["wrapper_needed"]:
            raise UsageError(
                "install.root contains {node}, and one slurm.conf names one Prolog=/Epilog= for every "
                "node: save `slurmkit install --hook-wrapper prolog` (and epilog) at one path on every "
                "node and set install.slurm_prolog / install.slurm_epilog to those paths"
            )
        if conf["error"]:
            raise SlurmkitError(conf["error"] + "; without it the lines cannot be merged with the cluster's own values")
        for line in conf["lines"]:
            click.echo(line)
        return 0
    nodes: list[str] = []
    if nodelist:
        nodes += expand_hostlist(nodelist)
    if partition:
        part = [r.name for r in ctx.backend().nodes() if partition in (r.partitions or [])]
        if not part:
            raise UsageError(f"--from-slurm: partition {partition!r} has no nodes")
        nodes += part
    nodes = list(dict.fromkeys(nodes))
    if not nodes:
        raise UsageError("no nodes: give --nodes HOSTLIST and/or --from-slurm PARTITION")

    wh = pl = None
    prolog = epilog = health = site_config = b""
    if not rollback:
        psrc, esrc, hsrc = bundle.hook_sources(inst)
        prolog, epilog, health = psrc.read_bytes(), esrc.read_bytes(), hsrc.read_bytes()
        cfg = inst.site_config_src or settings.source
        if not cfg:
            raise UsageError("no site config to push: give --config FILE (or set install.site_config_src)")
        try:
            site_config = Path(cfg).expanduser().read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read the site config to push: {e.strerror}", path=str(cfg)) from None
        wh = bundle.wheelhouse(inst, say=ctx.say)
        ctx.say(f"bundle {wh.bundle_id}: slurmkit {wh.version}, {len(wh.wheels)} wheels from {wh.directory}")
        if inst.prebuilt_venv:
            from ..install import payload

            pl = payload.build(wh, bundle.cache_root(), say=ctx.say)
            ctx.say(f"prebuilt venv for {pl.python.describe()}: {len(pl.data)} bytes from {pl.path}")

    def say(msg):
        click.echo(f"slurmkit: {msg}", err=True)

    connect = functools.partial(ssh.connect, install=inst, accept_new=accept_new_host_keys, say=say)
    job = Job(
        inst,
        wh,
        prolog,
        epilog,
        site_config,
        connect,
        dry_run=dry_run,
        do_verify=do_verify,
        do_rollback=rollback,
        health=health,
        payload=pl,
    )
    width = parallel or inst.parallel
    waves = -(-len(nodes) // width)
    if len(nodes) > width:
        ctx.say(f"{len(nodes)} nodes, {width} at a time: {waves} waves")
    t0 = time.monotonic()
    results = fanout.fan_out(
        nodes,
        lambda n: run_node(n, job),
        width,
        progress=None if not as_json else False,
        label="rollback" if rollback else "install",
    )

    conf = None if rollback else _slurm_conf(settings, layout(inst, nodes[0]), ctx)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    failed = [r for r in results if not r.ok]
    took = time.monotonic() - t0
    retry = _retry(ctx, [r.node for r in failed], rollback=rollback, dry_run=dry_run, do_verify=do_verify)
    if as_json:
        from ..output import emit_json

        emit_json(
            {
                "ok": not failed,
                "dry_run": dry_run,
                "rollback": rollback,
                "bundle": {
                    "id": wh.bundle_id,
                    "slurmkit_version": wh.version,
                    "prebuilt_venv": {"sha256": pl.sha256, "bytes": len(pl.data), "python": pl.python.describe()}
                    if pl
                    else None,
                }
                if wh
                else None,
                "summary": {
                    "nodes": len(results),
                    "ok": len(results) - len(failed),
                    "failed": len(failed),
                    "by_status": counts,
                    "failed_nodes": retry["hostlist"],
                    "retry": retry["command"],
                    "seconds": round(took, 2),
                    "parallel": width,
                    "waves": waves,
                },
                "nodes": [r.to_dict() for r in results],
                "slurm_conf": conf,
            }
        )
    else:
        _print_text(results, dry_run, conf)
        if failed:
            click.echo(f"slurmkit: retry the failed nodes ({retry['hostlist']}): {retry['command']}", err=True)
        if len(nodes) > 1:
            per = took / waves
            click.echo(
                f"slurmkit: {len(nodes)} nodes in {took:.1f}s ({waves} waves of {width}, {per:.1f}s a wave: "
                f"about {per * 1000 / width / 60:.0f} min per 1000 nodes at this width)",
                err=True,
            )
    return 1 if failed else 0


def _retry(ctx: Ctx, failed: list[str], *, rollback: bool, dry_run: bool, do_verify: bool) -> dict:
    """The failed nodes as one hostlist, and the command that runs the same install on them only (quoted to paste)."""
    import shlex

    from ..slurm import fold_hostlist

    if not failed:
        return {"hostlist": "", "command": None}
    hl = fold_hostlist(failed)
    argv = [
        "slurmkit",
        *(["--config", ctx.config_arg] if ctx.config_arg else []),
        "install",
        "--nodes",
        hl,
        *(["--rollback"] if rollback else []),
        *(["--dry-run"] if dry_run else []),
        *(["--verify"] if do_verify else []),
    ]
    return {"hostlist": hl, "command": " ".join(shlex.quote(a) for a in argv)}


def _slurm_conf(settings, lay, ctx) -> dict:
    """The slurm.conf advice: lines to paste (merged with the cluster's values), what is missing, and where."""
    from ..install import slurmconf

    inst = settings.install
    per_node = "{node}" in inst.root
    prolog, epilog = inst.slurm_prolog or lay.prolog, inst.slurm_epilog or lay.epilog
    lines = slurmconf.required_lines(
        prolog,
        epilog,
        inst.prolog_epilog_timeout,
        # one slurm.conf names one path: no per-node health script
        health=lay.health if inst.health_check_interval and not per_node else None,
        health_interval=inst.health_check_interval,
    )
    out = {
        "lines": [ln.text for ln in lines],
        "missing": [],
        "error": None,
        "node": lay.node,
        "per_node": per_node,
        "wrapper_needed": per_node and not (inst.slurm_prolog and inst.slurm_epilog),
        "configless": None,
        # the hook agent's unit, installed with the hooks; systemd starts it once told to
        "agent_unit": lay.agent_unit or None,
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


def _print_text(results, dry_run, conf) -> None:
    from ..output import table

    if dry_run:
        for r in results:
            if r.changes:
                click.echo(f"{r.node}: would change")
                for c in r.changes:
                    click.echo(f"  {c.action:12} {c.path}" + (f"  ({c.detail})" if c.detail else ""))
    rows = []
    for r in results:
        detail = r.error or r.note or ""  # a failed verify's error names the failing checks and why
        if r.verify is not None and r.verify["ok"]:
            detail = (detail + "; " if detail else "") + "check ok"
        rows.append([r.node, r.status, str(len(r.changes)), r.version or "-", f"{r.seconds:.1f}s", detail])
    click.echo(table(rows, ["NODE", "STATUS", "CHANGES", "VERSION", "TIME", "DETAIL"]))
    if conf is not None:
        _print_conf(conf)
    failed = [r for r in results if not r.ok]
    if failed:
        click.echo(f"slurmkit: {len(failed)} of {len(results)} nodes failed", err=True)


def _print_conf(conf: dict) -> None:
    where = (
        "on the controller only (configless: the nodes fetch it from there)"
        if conf["configless"]
        else "on the controller and every node"
    )
    click.echo(f"\nslurm.conf needs ({where}), merged with the cluster's values; then `scontrol reconfigure`:")
    for line in conf["lines"]:
        click.echo(f"  {line}")
    if conf["wrapper_needed"]:
        click.echo(
            f"install.root depends on the node (hook paths above as on {conf['node']}), and slurm.conf names "
            "one path for all: save `slurmkit install --hook-wrapper prolog` (and epilog) at one path on "
            "every node, and set install.slurm_prolog / install.slurm_epilog to it"
        )
    if conf.get("agent_unit"):
        click.echo(
            f"\nthe hook agent (the prolog and epilog then cost a fraction of their CPU; without it they run as before),"
            f" on every node: {conf['agent_enable']}"
        )
    if conf["error"]:
        click.echo(f"slurmkit: warning: {conf['error']}", err=True)
    for m in conf["missing"]:
        click.echo(f"slurmkit: warning: slurm.conf lacks {m['line']} (cluster has {m['have']}): {m['why']}", err=True)


__all__ = ["install"]
