"""SYNTHETIC `ibnetdiscover` output for tests: a fat tree made here, written with the printf formats of
infiniband-diags' ibnetdiscover.c (out_switch / out_switch_port / out_ca / out_ca_port: TABs, `(portguid) `
with leading zeros dropped, `# "desc" lid N 4xEDR`). Not a capture of any machine: the real captures are in
tests/fixtures/ib/. Used by tests/unit/fabric/test_*.py and tests/integration/test_fabric_cluster.py.
Also SYNTHETIC GB200-style `nvidia-smi -q` texts: the real H100 capture with its Fabric domain values replaced."""
from pathlib import Path

H100_Q = (Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
          / "h100-sxm-80gb-x8-nvidia-smi-q-565-fabric-completed-success-cliqueid-0-zero-clusteruuid-idle.txt")
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def synth_ibnetdiscover(leaves, spines=(), rate="4xEDR", isl_rate=None, rates=None, hcas=None, drop=(), isls=()):
    """leaves: {leaf name: [host, ...]}; every leaf is cabled to every spine. rates: {(host or leaf, peer): rate}
    overrides one cable's rate on both ends; hcas: {host: [(hca name, leaf), ...]} for hosts with several HCAs
    (default: one `mlx5_0` on its leaf); drop: node names whose own record is left out (their links are then
    seen from one end only); isls: extra (switch, switch) cables, e.g. two leaves cabled to each other."""
    rates = rates or {}
    isl_rate = isl_rate or rate
    guid = iter(range(0x0002C90300A00000, 0x0002C90300F00000, 0x10))
    lid = iter(range(1, 49152))  # the unicast LID space
    sw = {}
    for name in [*leaves, *spines]:
        sw[name] = {"guid": next(guid), "lid": next(lid), "ports": []}
    cas = []
    hcas = dict(hcas or {})
    for leaf, hosts in leaves.items():
        for h in hosts:
            hcas.setdefault(h, [("mlx5_0", leaf)])
    for h, lst in hcas.items():
        for dev, leaf in lst:
            g = next(guid)
            cas.append({"host": h, "dev": dev, "guid": g, "port_guid": g + 1, "lid": next(lid), "leaf": leaf})
    for ca in cas:
        s = sw[ca["leaf"]]
        p = len(s["ports"]) + 1
        r = rates.get((ca["host"], ca["leaf"]), rates.get((ca["leaf"], ca["host"]), rate))
        s["ports"].append(("ca", ca, 1, r))
        ca["sw_port"], ca["rate"] = p, r
    pairs = [(leaf, sp) for leaf in leaves for sp in spines] + list(isls)
    for leaf, sp in pairs:
        a, b = sw[leaf], sw[sp]
        r = rates.get((leaf, sp), rates.get((sp, leaf), isl_rate))
        a["ports"].append(("sw", sp, len(b["ports"]) + 1, r))
        b["ports"].append(("sw", leaf, len(a["ports"]), r))
    first = cas[0]
    out = [
        "#",
        "# Topology file: generated on Wed Dec  2 07:00:00 2026 (SYNTHETIC: tests/unit/fabric_synth.py)",
        "#",
        f"# Initiated from node {first['guid']:016x} port {first['port_guid']:016x}",
    ]
    for name, s in sw.items():
        if name in drop:
            continue
        out += [
            "",
            "vendid=0x2c9",
            "devid=0xcf08",
            f"sysimgguid=0x{s['guid']:x}",
            f"switchguid=0x{s['guid']:x}({s['guid']:x})",
            f'Switch\t41 "S-{s["guid"]:016x}"\t\t# "MF0;{name}:MQM8700/U1" enhanced port 0 lid {s["lid"]} lmc 0',
        ]
        for p, (kind, peer, peer_port, r) in enumerate(s["ports"], 1):
            if kind == "ca":
                out.append(
                    f'[{p}]\t"H-{peer["guid"]:016x}"[1]({peer["port_guid"]:x}) \t\t# "{peer["host"]} {peer["dev"]}" '
                    f"lid {peer['lid']} {r}"
                )
            else:
                t = sw[peer]
                out.append(f'[{p}]\t"S-{t["guid"]:016x}"[{peer_port}]\t\t# "MF0;{peer}:MQM8700/U1" lid {t["lid"]} {r}')
    for ca in cas:
        if ca["host"] in drop:
            continue
        s = sw[ca["leaf"]]
        out += [
            "",
            "vendid=0x2c9",
            "devid=0x101b",
            f"sysimgguid=0x{ca['guid']:x}",
            f"caguid=0x{ca['guid']:x}",
            f'Ca\t1 "H-{ca["guid"]:016x}"\t\t# "{ca["host"]} {ca["dev"]}"',
            f'[1]({ca["port_guid"]:x}) \t"S-{s["guid"]:016x}"[{ca["sw_port"]}]\t\t# lid {ca["lid"]} lmc 0 '
            f'"MF0;{ca["leaf"]}:MQM8700/U1" lid {s["lid"]} {ca["rate"]}',
        ]
    return "\n".join(out) + "\n"


def synthetic_nvl(uuid, clique, per_gpu=None):
    """SYNTHETIC: the real H100 `-q` text with every GPU's ClusterUUID/CliqueId set to a GB200-style domain
    (per_gpu: {gpu index: (uuid, clique)} to make GPUs disagree)."""
    out, i = [], -1
    for line in H100_Q.read_text().splitlines(keepends=True):
        if line.strip().startswith("CliqueId"):
            i += 1
            u, c = (per_gpu or {}).get(i, (uuid, clique))
            line = line.replace(": 0", f": {c}")
        elif line.strip().startswith("ClusterUUID"):
            u, c = (per_gpu or {}).get(i, (uuid, clique))
            line = line.replace(ZERO_UUID, u)
        out.append(line)
    return "".join(out)


def with_fabric(q_text, uuid, clique):
    """SYNTHETIC: an `nvidia-smi -q` text (such as a dev/fakegpu scenario's) with each GPU's Fabric section, the
    one it has or a new one before its `Processes` line, in the 565 driver's layout with this domain."""
    block = ("    Fabric\n        State                             : Completed\n"
             "        Status                            : Success\n"
             f"        CliqueId                          : {clique}\n"
             f"        ClusterUUID                       : {uuid}\n"
             "        Health\n            Bandwidth                     : N/A\n")
    kept, in_fabric = [], False
    for ln in q_text.splitlines(keepends=True):
        if ln.rstrip("\n") == "    Fabric":
            in_fabric = True
            continue
        if in_fabric and ln.startswith("        "):
            continue                       # the section's own lines: replaced below
        in_fabric = False
        kept.append(block + ln if ln.startswith("    Processes") else ln)
    return "".join(kept)
