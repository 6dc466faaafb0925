"""`slurmkit health`: the between-jobs health run (what Slurm's HealthCheckProgram runs), heavy-check sweeps as
Slurm jobs (`--sweep`), and the heavy run inside such a job (`--run-heavy`)."""

from __future__ import annotations

import os

import click

from .ctx import Ctx, pass_ctx
from ..errors import UsageError


PAIRS = "nccl-pairs"  # not a check of one node: all_reduce_perf between two, one job per pair


def _checks(value: str) -> tuple[str, ...]:
    from ..health.sweep import HEAVY

    names = tuple(x.strip() for x in value.split(",") if x.strip())
    if names == (PAIRS,):
        return names
    bad = [n for n in names if n not in HEAVY]
    if not names or bad:
        raise UsageError(f"--checks: expected some of {', '.join(HEAVY)}, or {PAIRS} alone, got {value!r}")
    return names


def _pairs_dir(ctx: Ctx, given: str | None) -> str:
    return given or os.path.join(ctx.settings.paths.state_dir, "sweep", PAIRS)


def _sweep_pairs(ctx: Ctx, take, left, part, pairing: str, out_dir: str, dry_run: bool, as_json: bool) -> int:
    """One job per pair of the swept nodes (pairs.plan), all_reduce_perf between the two; the plan beside their
    outputs, for `--pairs-report`."""
    from ..health import pairs, sweep as S
    from ..health.pairsreport import write_plan
    from ..output import emit_json

    s = ctx.settings
    if len(take) < 2:
        raise UsageError(
            f"--checks {PAIRS}: {len(take)} node(s) to sweep, a pair needs 2"
            + (f" ({len(left)} left out)" if left else "")
        )
    gpus = {r.name: r.gpus_total or 0 for r in take}
    plan = pairs.plan([r.name for r in take], pairing)
    tool = s.tools.all_reduce_perf
    argv = [tool] if isinstance(tool, str) else list(tool)
    jobs, shown = {}, []
    if not dry_run:
        os.makedirs(out_dir, exist_ok=True)
    for a, b in plan:
        out = S.pair_output(out_dir, a, b)
        text = S.pair_script(
            a,
            b,
            min(gpus[a], gpus[b]),
            tool=argv,
            args=list(s.nccl.args),
            time_limit=s.health.sweep_time_limit,
            partition=s.health.sweep_partition or part,
            qos=s.health.sweep_qos,
            nice=s.health.sweep_nice,
            output=out,
        )
        jid = None
        if not dry_run:
            if os.path.exists(out):
                os.unlink(out)  # a previous sweep's output is not this one's result
            jid = ctx.backend().submit(text)
        jobs[f"{a}+{b}"] = jid
        shown.append({"pair": [a, b], "job_id": jid, "script": text if dry_run else None})
    if not dry_run:
        write_plan(out_dir, plan, pairing, jobs)
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "checks": [PAIRS],
                "pairing": pairing,
                "pairs_dir": out_dir,
                "jobs": shown,
                "not_swept": [{"node": n, "why": w} for n, w in left],
            }
        )
    else:
        for (a, b), j in zip(plan, shown):
            click.echo(f"{a}-{b}: " + (f"would submit:\n{j['script']}" if dry_run else f"job {j['job_id']}"))
        for n, w in left:
            click.echo(f"{n}: {w}")
        if not dry_run:
            click.echo(f"when they have run: slurmkit health --pairs-report --pairs-dir {out_dir}")
    return 0


def _pairs_report(ctx: Ctx, out_dir: str, ib: str | None, as_json: bool) -> int:
    from ..health import pairs
    from ..health.pairsreport import document, exit_code, gather, text_lines
    from ..output import emit_json

    results, _doc = gather(out_dir)
    n = ctx.settings.nccl
    v = pairs.judge(results, expected=n.pairs_expected_busbw_gbps, min_ratio=n.min_ratio)
    fabric = None
    if ib is not None:
        from ..fabric import ibnet, tree
        from .fabric import _read_capture

        fabric = tree.build(ibnet.parse(_read_capture(ib), ib))
    doc = document(v, fabric)
    if as_json:
        emit_json(doc)
    else:
        for line in text_lines(doc):
            click.echo(line)
    return exit_code(doc)


def _sweep(
    ctx: Ctx, target: str, checks, dry_run: bool, as_json: bool, pairing: str = "ring", pairs_dir: str | None = None
) -> int:
    from ..health import sweep as S
    from ..output import emit_json
    from ..slurm import expand_hostlist

    s = ctx.settings
    recs = ctx.backend().nodes()
    partitions = {p for r in recs for p in r.partitions}
    if target in partitions:
        wanted, part = None, target
    else:
        try:
            wanted, part = set(expand_hostlist(target)), None
        except Exception as e:  # noqa: BLE001 - ClusterShell's parse errors, said as ours
            raise UsageError(
                f"--sweep {target!r}: not a partition ({', '.join(sorted(partitions))}) nor a hostlist: {e}"
            ) from None
        unknown = sorted(wanted - {r.name for r in recs})
        if unknown:
            raise UsageError(f"--sweep: no such node: {', '.join(unknown)}")
    take, left = S.targets(recs, wanted, part)
    if checks == (PAIRS,):
        return _sweep_pairs(ctx, take, left, part, pairing, _pairs_dir(ctx, pairs_dir), dry_run, as_json)
    out_dir = os.path.join(s.paths.state_dir, "sweep")
    jobs = []
    for r in take:
        text = S.script(
            r.name,
            r.gpus_total or 0,
            checks=checks,
            slurmkit_bin=s.submit.slurmkit_bin,
            config=ctx.config_arg,
            time_limit=s.health.sweep_time_limit,
            partition=s.health.sweep_partition or part,
            qos=s.health.sweep_qos,
            nice=s.health.sweep_nice,
            output=os.path.join(out_dir, "%x-%j.out"),
        )
        jid = None
        if not dry_run:
            os.makedirs(out_dir, exist_ok=True)
            jid = ctx.backend().submit(text)
        jobs.append({"node": r.name, "job_id": jid, "script": text if dry_run else None})
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "checks": list(checks),
                "jobs": jobs,
                "not_swept": [{"node": n, "why": w} for n, w in left],
            }
        )
    else:
        for j in jobs:
            click.echo(f"{j['node']}: " + (f"would submit:\n{j['script']}" if dry_run else f"job {j['job_id']}"))
        for n, w in left:
            click.echo(f"{n}: {w}")
    if not take:
        raise UsageError(f"--sweep {target}: no node to sweep" + (f" ({len(left)} left out)" if left else ""))
    return 0


def _run_heavy(ctx: Ctx, checks, node: str | None) -> int:
    """Inside a sweep job: run the heavy checks now (they cache their verdicts for the prolog), log them, drain on
    a failure; a node slurmkit drained for one of these checks is resumed once they all pass."""
    from .. import drain, healthlog
    from ..health.runner import node_name, run_checks

    s = ctx.settings
    node = node or os.environ.get("SLURMD_NODENAME") or node_name()
    jid = os.environ.get("SLURM_JOB_ID")
    report = run_checks(s, "full", only=list(checks), node=node, job_gpus=None)
    failed = report.failures[0] if report.failures else None
    action = "none"
    if failed is not None:  # retried, and recorded as pending for the next hook when Slurm cannot be reached
        action = drain.drain_for_hook(
            s,
            node,
            drain.reason_for_result(s, failed),
            check=failed.check,
            context="sweep",
            job_id=int(jid) if jid and jid.isdigit() else None,
        )
    else:
        try:
            (rec,) = ctx.backend().nodes(node)
        except (ValueError, Exception):  # noqa: BLE001 - the verdict stands; a resume can wait for audit
            rec = None
        if rec is not None and rec.drained and drain.check_of_reason(rec.reason, s) in checks:
            action = drain.resume_node(s, node)
    healthlog.write(
        s,
        [
            healthlog.record(
                check=r.check,
                status=r.status,
                reason=r.reason,
                evidence=r.evidence,
                context="sweep",
                node=node,
                job_id=int(jid) if jid and jid.isdigit() else None,
                action=action if r is failed or (failed is None and action != "none") else "none",
            )
            for r in report.results
        ],
    )
    for r in report.results:
        click.echo(f"{node}: {r.check} {r.status}: {r.reason}")
    if action != "none":
        click.echo(f"{node}: {action}")
    return 0 if report.healthy else 1


@click.command()
@click.option(
    "--sweep",
    "target",
    metavar="PARTITION|NODELIST",
    help="Submit one exclusive, low-priority job per node that runs the heavy checks when it is free.",
)
@click.option("--checks", default="nccl,dcgm", show_default=True, help="Heavy checks for --sweep/--run-heavy.")
@click.option("--run-heavy", is_flag=True, help="Run the heavy checks on this node now (what a sweep job runs).")
@click.option("--node", metavar="NAME", help="This node's Slurm name (default: SLURMD_NODENAME, the hostname).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --sweep: print the job scripts, submit nothing. Alone: say what "
    "remediation would do with this node (health.remediate), run no check, change nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="With --sweep or --pairs-report: print JSON.")
@click.option(
    "--pairing",
    type=click.Choice(["ring", "all"]),
    default="ring",
    show_default=True,
    help="With --checks nccl-pairs: each node with the next (two partners each) or every pair.",
)
@click.option(
    "--pairs-dir",
    metavar="DIR",
    help="Where the pair jobs write their output and --pairs-report reads it (a directory every node and this "
    "host see; default: paths.state_dir/sweep/nccl-pairs).",
)
@click.option("--pairs-report", is_flag=True, help="Judge the last NCCL pairs sweep: busbw per pair, slow nodes.")
@click.option(
    "--ibnetdiscover",
    "ib",
    metavar="FILE",
    help="With --pairs-report: an ibnetdiscover capture, to name the switch ports of a slow pair.",
)
@pass_ctx
def health(ctx: Ctx, target, checks, run_heavy, node, dry_run, as_json, pairing, pairs_dir, pairs_report, ib):
    """Between jobs. With no option: one health run on this node, as Slurm's HealthCheckProgram does it (drains
    by itself). --sweep: heavy checks as Slurm jobs (--checks nccl-pairs: all_reduce_perf between node pairs,
    judged by --pairs-report). Exit 0 ok, 1 unhealthy or failed, 2 bad input, 3 could not find out."""
    names = _checks(checks)
    if sum(map(bool, (target, run_heavy, pairs_report))) > 1:
        raise UsageError("--sweep, --run-heavy and --pairs-report: choose one")
    if ib and not pairs_report:
        raise UsageError("--ibnetdiscover goes with --pairs-report")
    if pairs_report:
        return _pairs_report(ctx, _pairs_dir(ctx, pairs_dir), ib, as_json)
    if names == (PAIRS,) and not target:
        raise UsageError(f"--checks {PAIRS} goes with --sweep PARTITION|NODELIST")
    if target:
        return _sweep(ctx, target, names, dry_run, as_json, pairing, pairs_dir)
    if run_heavy:
        return _run_heavy(ctx, names, node)
    from ..hooks.health import main

    env = dict(os.environ)
    if node:
        env["SLURMD_NODENAME"] = node
    return main(env, dry=dry_run)
