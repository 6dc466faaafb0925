from __future__ import annotations

import click

from .ctx import Ctx, pass_ctx


def _read(path: str) -> str:
    from ..bounded import read_text

    return read_text(path, what="capture")


@click.command()
@click.option("--topo-file", metavar="FILE", help="Parse this `nvidia-smi topo -m` capture instead of running it.")
@click.option(
    "--lscpu-file",
    metavar="FILE",
    help="CPU layout: `lscpu -p`, `lscpu` or `numactl -H` output (live: read from sysfs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the node profile as JSON (format: docs/topo.md).")
@click.option("--gres-conf", "gres", is_flag=True, help="Print gres.conf lines for this node's GPUs.")
@click.option("--node-name", metavar="NAME", help="NodeName= for the gres.conf lines.")
@click.option("--dev-dir", default=None, metavar="DIR", help="Where the nvidiaN devices are (default /dev).")
@click.option("--type", "gpu_type", metavar="TYPE", help="Type= for the gres.conf lines (e.g. h100).")
@pass_ctx
def topo(ctx: Ctx, topo_file, lscpu_file, as_json, gres, node_name, dev_dir, gpu_type):
    """GPU/NIC/CPU topology of a node: NVLink or PCIe, CPU and NUMA affinity, nearest NICs, warnings.

    Live (no --topo-file) it runs `nvidia-smi topo -m` (tools.nvidia_smi, topology.timeout) and reads the CPU layout
    from sysfs. --gres-conf prints gres.conf lines with Cores= in Slurm's logical core numbering."""
    from ..errors import UsageError
    from ..topology import parse_topo
    from ..topology.cpus import parse_cpu_layout, resolve

    if node_name and not gres:
        raise UsageError("--node-name only applies with --gres-conf")
    if topo_file:
        topology = parse_topo(_read(topo_file), path=topo_file)
    else:
        from ..topology.live import capture_topo, fill_numa_from_pci

        text, label = capture_topo(ctx.settings)
        topology = parse_topo(text, path=label)
        fill_numa_from_pci(topology, ctx.settings, ctx.say)
    layout = None
    if lscpu_file:
        layout = parse_cpu_layout(_read(lscpu_file), path=lscpu_file)
    elif not topo_file:
        from ..topology.live import capture_cpu_layout

        layout = capture_cpu_layout(ctx.settings, ctx.say)
    if layout is not None:
        resolve(topology, layout)

    if gres:
        from ..topology.gres import gres_conf_lines

        d = dev_dir if dev_dir is not None else (ctx.settings.topology.dev_dir if not topo_file else "/dev")
        click.echo("\n".join(gres_conf_lines(topology, layout, node_name=node_name, dev_dir=d, gpu_type=gpu_type)))
        for w in topology.warnings:
            click.echo(f"warning: {w}", err=True)
        return
    prof = topology.to_profile()
    if as_json:
        from ..output import emit_json

        emit_json(prof)
        return
    from ..output import table
    from ..topology.model import format_cpulist, is_nvlink, link_rank

    rows = []
    nic_dev = {n["name"]: n["device"] or n["name"] for n in prof["nics"]}
    for g in prof["gpus"]:
        nv = [c for c, t in g["links"].items() if c.startswith("GPU") and is_nvlink(t)]
        near = sorted(((link_rank(t), c) for c, t in g["links"].items() if c in nic_dev), key=lambda x: x[0])
        best = [f"{nic_dev[c]}({g['links'][c]})" for r, c in near if near and r == near[0][0] and r <= 4]
        rows.append(
            [
                f"GPU{g['index']}",
                format_cpulist(g["cpus"]) or "?",
                format_cpulist(g["numa"]) or "?",
                ",".join(x[3:] for x in nv) or "-",
                " ".join(best) or "-",
            ]
        )
    click.echo(table(rows, ["GPU", "CPUS", "NUMA", "NVLINK TO GPU", "NEAREST NIC"]))
    click.echo(f"interconnect: {prof['interconnect']}")
    for w in prof["warnings"]:
        click.echo(f"warning: {w}")
