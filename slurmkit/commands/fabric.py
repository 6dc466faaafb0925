from __future__ import annotations

import sys

import click

from .ctx import Ctx, pass_ctx
from ..files import atomic_write

GUID_MAP_LIMIT = 16 * 1024 * 1024


def _read_capture(path: str) -> str:
    from ..bounded import read_text
    from ..fabric.ibnet import MAX_BYTES
    from ..errors import UsageError

    if path != "-":
        return read_text(path, limit=MAX_BYTES, what="capture")
    data = sys.stdin.buffer.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UsageError(f"capture on stdin is over the limit of {MAX_BYTES} bytes", path="<stdin>")
    return data.decode("utf-8", "replace")


def _guid_map(path: str) -> dict[str, str]:
    """`GUID host` lines, or an ibnetdiscover node-name map (`0xGUID "host HCA-1"`): GUID -> host (first word)."""
    import re

    from ..bounded import read_text
    from ..errors import UsageError
    from ..fabric.ibnet import norm_guid
    from ..fabric.tree import HOST

    out = {}
    for n, line in enumerate(read_text(path, limit=GUID_MAP_LIMIT, what="GUID map").splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.fullmatch(r'(?:0x)?([0-9a-fA-F]{1,16})\s+"?([^"\s]+)[^"]*"?', s)
        if not m or not HOST.fullmatch(m.group(2)):
            raise UsageError(f"not a `GUID host` line: {s[:80]!r}", path=path, line=n)
        out[norm_guid(m.group(1))] = m.group(2)
    return out


def _slurm_nodes(ctx: Ctx, expr: str | None, ask: bool) -> set[str] | None:
    if expr:
        from ..hostlist import expand

        return set(expand(expr))
    if not ask:
        return None
    from ..errors import CommandError, SlurmkitError

    try:
        return {r.name for r in ctx.backend().nodes()}
    except (CommandError, SlurmkitError) as e:
        raise _Unknown(f"could not ask Slurm for its nodes: {e}") from None


class _Unknown(Exception):
    """Could not find out (exit 3)."""


def _capture_live(timeout: float) -> tuple[str, str]:
    from ..errors import CommandError
    from ..proc import run

    try:
        r = run(["ibnetdiscover"], timeout=timeout)
    except CommandError as e:
        raise _Unknown(f"could not run ibnetdiscover: {e}") from None
    return r.stdout, "ibnetdiscover"


@click.command()
@click.option(
    "--ibnetdiscover",
    "capture",
    metavar="FILE|-",
    help="Read this ibnetdiscover (also -p) or iblinkinfo capture (- for stdin) instead of running `ibnetdiscover`.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, 3600),
    default=120,
    show_default=True,
    help="Seconds a live `ibnetdiscover`, or each --gather srun, may take.",
)
@click.option("--guid-map", metavar="FILE", help="HCA GUID -> host name (`GUID host` lines or a node-name map).")
@click.option("--hca", metavar="NAME", help="Only HCAs whose description names this device (one rail: mlx5_0).")
@click.option("--slurm-nodes", metavar="HOSTLIST", help="Compare with these Slurm nodes (default: not compared).")
@click.option("--compare-slurm", is_flag=True, help="Compare with the nodes Slurm has (sinfo).")
@click.option("--topology-conf", "conf_out", is_flag=True, help="Print topology.conf (topology/tree) lines.")
@click.option("--topology-yaml", "yaml_out", is_flag=True, help="Print topology.yaml (Slurm 25.05+).")
@click.option(
    "--nvsmi-dir",
    metavar="DIR",
    help="NVLink domains instead: one `nvidia-smi -q` capture per node in"
    " DIR (file name = node name, .txt optional) -> topology/block, one block per domain.",
)
@click.option(
    "--gather",
    "gather_hosts",
    metavar="HOSTLIST",
    help="First run `nvidia-smi -q` on these nodes (one exclusive srun each, --timeout each) and keep each"
    " node's output in --nvsmi-dir.",
)
@click.option("--partition", metavar="NAME", help="Partition of the --gather step.")
@click.option("--json", "as_json", is_flag=True, help="Print switches, levels, nodes, links and findings as JSON.")
@pass_ctx
def fabric(
    ctx: Ctx,
    capture,
    timeout,
    guid_map,
    hca,
    slurm_nodes,
    compare_slurm,
    conf_out,
    yaml_out,
    nvsmi_dir,
    gather_hosts,
    partition,
    as_json,
):
    """The InfiniBand switch tree across nodes: leaves with their nodes, spines above, and findings.

    Findings (exit 1): a link trained below the fabric's common rate or width, a link seen from one end only, a
    node whose HCAs hang from different leaves, an HCA without a host name, a node Slurm has that the fabric does
    not show and the reverse. Exit 2: a capture slurmkit cannot read (file and line); 3: ibnetdiscover or Slurm
    did not answer. The topology files go to stdout, findings to stderr."""
    from ..errors import UsageError
    from ..fabric import conf, ibnet, tree

    if sum(map(bool, (conf_out, yaml_out, as_json))) > 1:
        raise UsageError("choose one of --topology-conf, --topology-yaml and --json")
    if slurm_nodes and compare_slurm:
        raise UsageError("--slurm-nodes and --compare-slurm are two answers to one question: give one")
    if nvsmi_dir:
        from ..hostlist import expand

        if capture or guid_map or hca:
            raise UsageError("--nvsmi-dir builds NVLink blocks: it takes no --ibnetdiscover, --guid-map or --hca")
        if gather_hosts:
            try:
                _gather(ctx, gather_hosts, nvsmi_dir, timeout, partition)
            except _Unknown as e:
                click.echo(f"slurmkit: {e}", err=True)
                return 3
        return _nvlink(nvsmi_dir, conf_out, yaml_out, as_json, only=set(expand(gather_hosts)) if gather_hosts else None)
    if gather_hosts or partition:
        raise UsageError("--gather and --partition gather nvidia-smi -q captures: give --nvsmi-dir too")
    try:
        if capture:
            text, label = _read_capture(capture), (capture if capture != "-" else "<stdin>")
        else:
            text, label = _capture_live(timeout)
        cap = ibnet.parse(text, label)
        gm = _guid_map(guid_map) if guid_map else None
        nodes = _slurm_nodes(ctx, slurm_nodes, compare_slurm)
    except _Unknown as e:
        click.echo(f"slurmkit: {e}", err=True)
        return 3
    fab = tree.build(cap, guid_map=gm, hca=hca, slurm_nodes=nodes)
    ctx.say(f"{label}: {cap.fmt} format, {len(cap.nodes)} fabric nodes, {len(fab.links)} links")
    if as_json:
        from ..output import emit_json

        emit_json(conf.to_json(fab))
        return 1 if fab.findings else 0
    if conf_out or yaml_out:
        click.echo((conf.topology_conf if conf_out else conf.topology_yaml)(fab, label), nl=False)
    else:
        _table(fab)
    from ..output import printable

    for f in fab.findings:
        where = f" (line {f.line})" if f.line else ""
        click.echo(f"finding: {f.kind}: {printable(f.message)}{where}", err=True)
    return 1 if fab.findings else 0


def _table(fab) -> None:
    from ..fabric.conf import fold
    from ..output import printable, table

    rows = []
    for lvl, sws in fab.by_level().items():
        for s in sorted(sws, key=lambda s: s.name):
            kind = "leaf" if lvl == 0 else f"level {lvl}"
            under = fold(s.nodes) if lvl == 0 else fold(s.children) if s.children else "-"
            rows.append([s.name, kind, printable(s.desc) or "-", under or "-"])
    click.echo(table(rows, ["SWITCH", "LEVEL", "DESCRIPTION", "NODES / SWITCHES BELOW"]))
    click.echo(f"{len(fab.hosts)} nodes, {len(fab.switches)} switches, {len(fab.links)} links ({fab.fmt})")


MAX_NODE_FILES = 100_000


def _nvlink(directory: str, conf_out: bool, yaml_out: bool, as_json: bool, only: set[str] | None = None) -> int:
    import os
    import stat

    from ..bounded import read_text
    from ..errors import UsageError
    from ..fabric import nvlink
    from ..fabric.tree import HOST
    from ..output import printable

    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise UsageError(f"cannot list the nvidia-smi -q captures: {e.strerror}", path=directory) from None
    if len(names) > MAX_NODE_FILES:
        raise UsageError(f"{len(names)} files, over the limit of {MAX_NODE_FILES} nodes", path=directory)
    per_node = {}
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith(".") or not stat.S_ISREG(os.lstat(path).st_mode):
            continue
        node = name[:-4] if name.endswith(".txt") else name
        if only is not None and node not in only:
            continue
        if not HOST.fullmatch(node):
            raise UsageError(f"{name!r} does not name a node (file name = node name)", path=path)
        per_node[node] = nvlink.parse_fabric(read_text(path, what="nvidia-smi -q capture"), path)
    if not per_node:
        raise UsageError("no nvidia-smi -q captures in this directory", path=directory)
    d = nvlink.domains(per_node)
    if as_json:
        from ..output import emit_json

        emit_json(nvlink.to_json(d, per_node))
        return 1 if d.findings else 0
    if yaml_out:
        click.echo(nvlink.block_yaml(d, directory), nl=False)
    elif conf_out:
        click.echo(nvlink.block_conf(d, directory), nl=False)
    else:
        from ..fabric.conf import fold
        from ..output import table

        click.echo(table([[b, str(len(n)), fold(n)] for b, n in d.blocks.items()], ["BLOCK", "NODES", "HOSTLIST"]))
    for f in d.findings:
        click.echo(f"finding: {f.kind}: {printable(f.message)}", err=True)
    return 1 if d.findings else 0


def _gather(ctx: Ctx, hosts_expr: str, directory: str, timeout: float, partition: str | None) -> None:
    """nvidia-smi -q from each node (one srun each) into DIR/<node>.txt on this host."""
    import os

    from ..errors import UsageError
    from ..fabric import gather
    from ..fabric.conf import fold
    from ..hostlist import expand

    hosts = expand(hosts_expr)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot make the capture directory: {e.strerror}", path=directory) from None
    ctx.say(f"gathering nvidia-smi -q from {len(hosts)} nodes (one srun each) into {directory}")
    got, failed = gather.gather(hosts, ctx.settings.tools.nvidia_smi, timeout=timeout, partition=partition)
    for host, text in got.items():
        atomic_write(os.path.join(directory, f"{host}.txt"), text)  # never through a link left in the directory
    for host, why in sorted(failed.items()):
        ctx.say(f"{host}: {why}")
    if failed:
        first = next(iter(sorted(failed.items())))
        raise _Unknown(f"no nvidia-smi -q came back from {fold(list(failed))} ({first[0]}: {first[1]})")
