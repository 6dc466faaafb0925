"""`slurmkit install`: the options and the printing; what an install does is slurmkit/install/service.py."""

from __future__ import annotations

from pathlib import Path

import click

from .ctx import Ctx, pass_ctx
from ..errors import SlurmkitError, UsageError


@click.command()
@click.option("--nodes", "nodelist", metavar="HOSTLIST", help="Nodes to install to, a hostlist: 'gpu[001-128]'.")
@click.option("--from-slurm", "partition", metavar="PARTITION", help="Also every node of this Slurm partition.")
@click.option("--dry-run", is_flag=True, help="Print per node what would change; change nothing.")
@click.option("--parallel", type=click.IntRange(min=1), help="Nodes at a time (default: install.parallel, 16).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report (format: docs/install.md).")
@click.option("--rollback", is_flag=True, help="Put back what each node had before the last install.")
@click.option(
    "--uninstall",
    is_flag=True,
    help="Take off each node everything install put there (hooks, config, venvs, wheels, agent unit, runtime "
    "dir, the node's state files, the hook wrappers); refused while slurm.conf still names the hooks.",
)
@click.option(
    "--remove-logs", is_flag=True, help="With --uninstall: also the node's health log files (kept by default)."
)
@click.option("--force", is_flag=True, help="With --uninstall: go ahead when slurm.conf cannot be read.")
@click.option(
    "--forward",
    is_flag=True,
    help="Install over a --rollback: a rolled-back node is held (not changed) until this is given.",
)
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
    type=click.Choice(["prolog", "epilog", "health"]),
    help="Only print the wrapper script slurm.conf's Prolog=, Epilog= or HealthCheckProgram= must name when "
    "install.root contains {node} (it runs this node's installed hook, by $SLURMD_NODENAME).",
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
    uninstall,
    remove_logs,
    force,
    forward,
    do_verify,
    accept_new_host_keys,
    build_dir,
    conf_only,
    hook_wrapper,
):
    """Put the prolog, epilog, site config and slurmkit (a venv) on nodes over SSH: staged, hash-checked,
    renamed into place, previous version kept for --rollback; or take it all off again (--uninstall).
    Exit 1 if any node failed."""
    from ..install import bundle, service
    from ..install.layout import layout

    settings = ctx.settings
    inst = settings.install
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
        hook = {"prolog": lay.prolog, "epilog": lay.epilog, "health": lay.health}[hook_wrapper]
        click.echo(wrapper_script(hook_wrapper, hook), nl=False)
        return 0
    if conf_only:
        conf = service.slurm_conf_advice(settings, layout(inst, "{node}"))
        if conf["wrapper_needed"]:
            raise UsageError(
                "install.root contains {node}, and one slurm.conf names one Prolog=/Epilog=/HealthCheckProgram= "
                "for every node: save `slurmkit install --hook-wrapper prolog` (and epilog, health) at one path "
                "on every node and set install.slurm_prolog / slurm_epilog / slurm_health to those paths "
                "(or install.health_check_interval: 0 for no HealthCheckProgram)"
            )
        if conf["error"]:
            raise SlurmkitError(conf["error"] + "; without it the lines cannot be merged with the cluster's own values")
        for line in conf["lines"]:
            click.echo(line)
        return 0
    if (remove_logs or force) and not uninstall:
        raise UsageError("--remove-logs and --force go with --uninstall")
    if forward and (rollback or uninstall):
        raise UsageError("--forward goes with an install, not with --rollback or --uninstall")
    if uninstall and (rollback or do_verify):
        raise UsageError("--uninstall cannot be combined with --rollback or --verify")
    nodes = service.target_nodes(nodelist, partition, lambda: ctx.backend().nodes())
    report = service.install(
        settings,
        nodes,
        dry_run=dry_run,
        rollback=rollback,
        verify=do_verify,
        accept_new_host_keys=accept_new_host_keys,
        parallel=parallel,
        progress=None if not as_json else False,
        config_arg=ctx.config_arg,
        uninstall=uninstall,
        remove_logs=remove_logs,
        force=force,
        forward=forward,
        say=ctx.say,
        warn=lambda m: click.echo(f"slurmkit: {m}", err=True),
    )
    if as_json:
        from ..output import emit_json

        emit_json(report.to_dict())
    else:
        _print_text(report.results, dry_run, None if uninstall else report.slurm_conf)
        if uninstall and report.slurm_conf is not None:
            _print_removal(report.slurm_conf)
        if report.failed:
            click.echo(
                f"slurmkit: retry the failed nodes ({report.retry['hostlist']}): {report.retry['command']}", err=True
            )
        if len(nodes) > 1:
            per = report.seconds / report.waves
            click.echo(
                f"slurmkit: {len(nodes)} nodes in {report.seconds:.1f}s ({report.waves} waves of {report.parallel}, "
                f"{per:.1f}s a wave: about {per * 1000 / report.parallel / 60:.0f} min per 1000 nodes at this width)",
                err=True,
            )
    return 1 if report.failed else 0


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


def _print_removal(conf: dict) -> None:
    click.echo("\nslurm.conf: take out these lines (on the controller and every node), then `scontrol reconfigure`:")
    for line in conf["remove"]:
        click.echo(f"  {line}")
    click.echo(f"  ({conf['also']})")
    if conf["still_configured"]:
        click.echo(f"slurmkit: warning: the cluster still has {', '.join(conf['still_configured'])}", err=True)
    if conf["error"]:
        click.echo(f"slurmkit: warning: {conf['error']}", err=True)


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
            "one path for all: save `slurmkit install --hook-wrapper prolog` (and epilog, health) at one path on "
            "every node, and set install.slurm_prolog / slurm_epilog / slurm_health to it"
        )
    if conf.get("agent_unit") and conf.get("agent_enabled"):
        click.echo(
            "\nthe hook agent (agent.enabled): install enables and starts it where systemd runs the node, and says"
            " how to run it where it does not; `slurmkit agent status` on a node shows it"
        )
    elif conf.get("agent_unit"):
        click.echo(
            "\nthe hook agent (the prolog and epilog then cost a fraction of their CPU; without it they run as before):"
            " set agent.enabled: true in the site config, and install enables and starts it on every node"
        )
    if conf["error"]:
        click.echo(f"slurmkit: warning: {conf['error']}", err=True)
    for m in conf["missing"]:
        click.echo(f"slurmkit: warning: slurm.conf lacks {m['line']} (cluster has {m['have']}): {m['why']}", err=True)


__all__ = ["install"]
