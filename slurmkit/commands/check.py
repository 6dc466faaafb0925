"""`slurmkit check`: run the health checks on this node, or on captured output from a support ticket."""

from __future__ import annotations

import click

from ..health.checks import registry
from .ctx import Ctx, pass_ctx


def _split_only(value: str | None) -> list[str] | None:
    if not value:
        return None
    return [x.strip() for x in value.split(",") if x.strip()]


def _gres_gpus(ctx: Ctx, node: str | None) -> int | None:
    """The node's gres GPU count from Slurm, when the config names no expected count (best effort)."""
    from ..health.checks.gpu_count import expected_for
    from ..health.runner import node_name

    name = node or node_name()
    if expected_for(ctx.settings, name) is not None:
        return None
    try:
        recs = ctx.backend().nodes(name)
    except Exception as e:  # noqa: BLE001 - no Slurm here (a workstation, a ticket): judge without it
        ctx.say(f"no gres count for {name}: {e}")
        return None
    return recs[0].gpus_total if recs and recs[0].gpus_total else None


@click.command()
@click.option(
    "--only",
    metavar="CHECKS",
    help=f"Comma-separated checks to run ({','.join(registry.ORDER)}). Naming nccl runs all_reduce_perf now "
    "and caches its result; naming dcgm runs DCGM's diagnostic.",
)
@click.option(
    "--capture",
    "captures",
    multiple=True,
    metavar="CHECK=FILE",
    help="Judge a captured file instead of running the tool (repeatable): xid=dmesg.txt, "
    "ecc=nvidia-smi-q.txt, nccl=allreduce.txt ...",
)
@click.option(
    "--profile",
    type=click.Choice(list(registry.PROFILES)),
    default="full",
    show_default=True,
    help="Which set of checks to run (config health.profiles).",
)
@click.option("--gpus", metavar="LIST", help="GPU indices a job would get (for gpu_procs), e.g. 0,1.")
@click.option("--node", metavar="NAME", help="Node name for per-node settings (default: this host).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format: docs/check.md).")
@pass_ctx
def check(ctx: Ctx, only, captures, profile, gpus, node, as_json):
    """Run GPU health checks on this node. Exit 0 healthy (warnings allowed), 1 unhealthy, 2 bad usage or
    unreadable input. It never drains, and does not move the Xid "seen" mark the prolog keeps; a fatal kernel-log
    fault of this boot fails it until a reboot, and `--only xid` over a clean log (what `audit resume --recheck`
    runs) ends that fault."""
    from ..errors import UsageError
    from ..health.runner import parse_gpu_list, run_checks

    caps: dict[str, str] = {}
    paths: dict[str, str] = {}
    for item in captures:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"--capture {item!r}: expected CHECK=FILE")
        from ..bounded import read_text

        caps[name.strip()] = read_text(path, what=f"--capture {name.strip()}")
        paths[name.strip()] = path
    expected = None
    names = _split_only(only)
    if not caps and (names is None or "gpu_count" in names):
        expected = _gres_gpus(ctx, node)
    try:
        report = run_checks(
            ctx.settings,
            profile,
            only=names,
            captures=caps or None,
            job_gpus=parse_gpu_list(gpus),
            node=node,
            expected_gpus=expected,
        )
    except UsageError as e:
        name = getattr(e, "check", None)
        if name in paths:  # name the file the admin gave us
            msg = str(e).split(": ", 1)[-1] + f" (--capture {name})"
            raise UsageError(msg, path=paths[name], line=e.line) from None
        raise
    if as_json:
        from ..output import emit_json

        emit_json(report.to_dict())
    else:
        from ..output import table

        rows = [[r.check, r.status.upper() if r.status == "fail" else r.status, r.reason] for r in report.results]
        click.echo(table(rows, ["CHECK", "STATUS", "REASON"]))
        click.echo(f"{report.node}: {'healthy' if report.healthy else 'UNHEALTHY'}")
    return 0 if report.healthy else 1
