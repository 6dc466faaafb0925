"""`slurmkit fabric` (issue 33): every real capture in tests/fixtures/ib/ parses into the tree it shows, with the
findings it shows; synthetic fabrics (tests/unit/fabric_synth.py, named synthetic) make each finding fire and the
topology files come out as Slurm reads them; hostile or truncated captures exit 2 with file and line."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.fabric import conf, ibnet, tree

from clirun import run_cli  # noqa: E402
from fabric_synth import synth_ibnetdiscover  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
IB = REPO / "tests" / "fixtures" / "ib"
EDR_GREP = IB / "edr-sb7700-3host-iblinkinfo-grep-up.txt"
NDR200 = IB / "ndr200-qm9700-split-ports-ibnetdiscover-redacted-guids-omitted-tail.txt"
OSC = IB / "osc-edr-ibnetdiscover-p-ports-subset-node-name-map-4x-unknown-speed-port.txt"
QDR = IB / "qdr-infiniscale-iv-4hca-iblinkinfo-32-ports-down-polling-4space-ca-indent.txt"


def fabric(*args):
    return run_cli(["fabric", *args])


def doc(path, *args):
    rc, out, err = fabric("--ibnetdiscover", str(path), "--json", *args)
    return rc, json.loads(out), err


def write(tmp_path, text, name="ibnet.txt"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def kinds(d):
    return [f["kind"] for f in d["findings"]]


# ---- every real capture ----

def test_iblinkinfo_grep_up_without_headers_one_edr_leaf_three_hosts_healthy():
    rc, d, _ = doc(EDR_GREP)
    assert rc == 0 and d["format"] == "iblinkinfo" and d["findings"] == [] and d["ok"] is True
    assert d["levels"] == {"0": ["SB7700"]}
    assert sorted(d["nodes"]) == ["mgt", "n01", "n02"]            # "mgt mlx5_0" as well as "n01 HCA-1"
    assert {lk["rate"] for lk in d["links"]} == {"4xEDR"}         # 25.78125 Gbps per lane
    assert [lk["seen_from"] for lk in d["links"]] == [2, 2, 2]    # HCA lines and switch lines pair up by LID
    rc, out, _ = fabric("--ibnetdiscover", str(EDR_GREP), "--topology-conf")
    assert rc == 0 and out.splitlines()[-1] == "SwitchName=SB7700 Nodes=mgt,n[01-02]"


def test_ibnetdiscover_ndr200_redacted_guids_split_ports_and_omitted_tail():
    rc, d, err = doc(NDR200)
    assert d["format"] == "ibnetdiscover"
    # three HCAs share the redacted GUID text "946d<redacted>": they stay three hosts, told apart by description
    assert sorted(d["nodes"]) == [f"tj01-4090-node00{i}" for i in (4, 5, 6, 7, 9)]
    assert d["switches"][0]["name"] == "CNTSN-POD229-QM97-IB-02" and d["switches"][0]["level"] == 0
    assert {lk["rate"] for lk in d["links"]} == {"2xNDR"}         # NDR200 split ports: not a degraded link
    # the paste ends with `...omitted`: the capture says it is partial, and that is the finding (exit 1); the
    # switch-side-only links of a cut capture are not judged one by one
    assert kinds(d) == ["elided"] and d["elided_at"] == [16] and rc == 1


def test_ibnetdiscover_ports_subset_spine_above_leaf_unknown_speed_port_is_no_link():
    rc, d, _ = doc(OSC)
    assert d["format"] == "ibnetdiscover-ports"
    assert d["levels"] == {"0": ["ib-i1l1s01", "ib-i4l1s01"], "1": ["ib-i1l2s01"]}
    spine = next(s for s in d["switches"] if s["name"] == "ib-i1l2s01")
    assert spine["children"] == ["ib-i1l1s01"]
    assert d["nodes"]["o0001"]["leaf"] == "ib-i1l1s01" and d["nodes"]["p0001"]["leaf"] == "ib-i4l1s01"
    assert not any(lk["a"]["port"] == 37 or lk["b"]["port"] == 37 for lk in d["links"])    # `4x ???`: empty port
    # the subset holds the leaf->spine cable from the leaf's side only: the one finding this capture shows
    assert kinds(d) == ["one-sided-link"] and rc == 1
    assert "ib-i1l1s01[1] - ib-i1l2s01[1]" in d["findings"][0]["message"] and d["findings"][0]["line"] == 6


def test_iblinkinfo_qdr_down_polling_ports_are_empty_ports_not_faults():
    rc, d, _ = doc(QDR)
    assert rc == 0 and d["findings"] == []
    assert sorted(d["nodes"]) == ["centos-data-200", "centos-data-201", "centos-data-202", "kube-node-100"]
    assert len(d["links"]) == 4 and {lk["rate"] for lk in d["links"]} == {"4xQDR"}
    # "Infiniscale-IV Mellanox Technologies" names no switch: the switch is known by its GUID from the header
    assert d["levels"] == {"0": ["ibsw-0002c9020046c588"]}


@pytest.mark.parametrize("path", sorted(IB.glob("*.txt")), ids=lambda p: p.name[:40])
def test_every_real_capture_parses_and_gives_a_topology_conf(path):
    rc, out, err = fabric("--ibnetdiscover", str(path), "--topology-conf")
    assert rc in (0, 1), err
    assert [ln for ln in out.splitlines() if ln.startswith("SwitchName=")]


# ---- findings on synthetic fabrics ----

def test_synthetic_4xddr_isl_among_4xedr_is_a_degraded_link_and_exit_1(tmp_path):
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3", "n4"]}, ["spine1", "spine2"],
                                            rates={("leaf2", "spine1"): "4xDDR"}))
    rc, out, err = fabric("--ibnetdiscover", p)
    assert rc == 1
    assert "finding: degraded-link: link leaf2[3] - spine1[2] trained at 4xDDR: speed DDR below the fabric's " \
           "common EDR" in err
    assert err.count("finding:") == 1


def test_synthetic_healthy_fat_tree_no_findings_and_exit_0(tmp_path):
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3", "n4"]}, ["spine1", "spine2"]))
    rc, out, err = fabric("--ibnetdiscover", p)
    assert rc == 0 and "finding" not in err
    assert out.splitlines()[0].split() == ["SWITCH", "LEVEL", "DESCRIPTION", "NODES", "/", "SWITCHES", "BELOW"]


def test_synthetic_split_host_ports_under_ndr_isls_are_not_degraded_but_a_1x_host_link_is(tmp_path):
    leaves = {"leaf1": ["n1", "n2", "n3"], "leaf2": ["n4", "n5"]}
    p = write(tmp_path, synth_ibnetdiscover(leaves, ["spine1"], rate="2xNDR", isl_rate="4xNDR"))
    assert fabric("--ibnetdiscover", p)[0] == 0
    p = write(tmp_path, synth_ibnetdiscover(leaves, ["spine1"], rate="2xNDR", isl_rate="4xNDR",
                                            rates={("n2", "leaf1"): "1xNDR"}))
    rc, _, err = fabric("--ibnetdiscover", p)
    assert rc == 1 and "width 1x below the common 2x of host links" in err and "n2 mlx5_0" in err


def test_synthetic_mixed_generation_fdr_core_over_edr_hosts_is_normal_but_a_ddr_isl_is_not(tmp_path):
    leaves = {f"leaf{i}": [f"n{i}{j}" for j in range(3)] for i in range(1, 4)}
    p = write(tmp_path, synth_ibnetdiscover(leaves, ["spine1", "spine2"], rate="4xEDR", isl_rate="4xFDR"))
    assert fabric("--ibnetdiscover", p)[0] == 0           # 6 FDR ISLs: their own norm, not "below EDR"
    p = write(tmp_path, synth_ibnetdiscover(leaves, ["spine1", "spine2"], rate="4xEDR", isl_rate="4xFDR",
                                            rates={("leaf3", "spine2"): "4xDDR"}))
    rc, _, err = fabric("--ibnetdiscover", p)
    assert rc == 1 and err.count("finding:") == 1 and "leaf3[5] - spine2[3] trained at 4xDDR: speed DDR below " \
        "the fabric's common FDR" in err


def test_synthetic_single_ddr_isl_between_two_switches_is_judged_by_the_whole_fabric(tmp_path):
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n2", "n3"]}, ["spine1"], isl_rate="4xDDR"))
    rc, _, err = fabric("--ibnetdiscover", p)
    assert rc == 1 and "leaf1[4] - spine1[1] trained at 4xDDR: speed DDR below the fabric's common EDR" in err


# SYNTHETIC iblinkinfo lines in iblinkinfo.c's formats: line mode (-l, every line starts with the port GUID and
# the description) and the "Could be" hint iblinkinfo prints when a link trained below what both ends support
IBLINK_L = (
    '0x0002c903000d81f9 "                      n1 HCA-1"      4    1[  ] ==( 4X          10.0 Gbps Active/  LinkUp)'
    '==>  0x0002c9020046c588      2    3[  ] "sw1" ( Could be 14.0625 Gbps)\n'
    '0x0002c9020046c588 "                           sw1"      2    3[  ] ==( 4X          10.0 Gbps Active/  LinkUp)'
    '==>  0x0002c903000d81f9      4    1[  ] "n1 HCA-1" ( Could be 14.0625 Gbps)\n'
    '0x0002c903000d81fa "                      n2 HCA-1"      5    1[  ] ==( 4X          10.0 Gbps Active/  LinkUp)'
    '==>  0x0002c9020046c588      2    4[  ] "sw1" ( )\n'
    '0x0002c9020046c588 "                           sw1"      2    4[  ] ==( 4X          10.0 Gbps Active/  LinkUp)'
    '==>  0x0002c903000d81fa      5    1[  ] "n2 HCA-1" ( )\n'
    '0x0002c9020046c588 "                           sw1"      2    5[  ] ==(                Down/ Polling)==>'
    '             [  ] "" ( )\n'
)


def test_synthetic_iblinkinfo_line_mode_and_its_could_be_hint(tmp_path):
    rc, d, _ = doc(write(tmp_path, IBLINK_L))
    assert d["format"] == "iblinkinfo" and sorted(d["nodes"]) == ["n1", "n2"] and d["levels"] == {"0": ["sw1"]}
    assert rc == 1 and kinds(d) == ["degraded-link"]
    assert d["findings"][0]["message"] == "link n1 HCA-1[1] - sw1[3] trained at 4xQDR: iblinkinfo says: Could be " \
        "14.0625 Gbps"


def test_synthetic_link_seen_from_one_end_only(tmp_path):
    # n3's own record is missing: its cable is reported by the leaf alone
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n2", "n3"]}, drop={"n3"}))
    rc, d, _ = doc(p)
    assert rc == 1 and kinds(d) == ["one-sided-link"]
    assert "leaf1[3] - n3 mlx5_0[1]" in d["findings"][0]["message"]
    assert d["nodes"]["n3"]["leaf"] == "leaf1"          # still placed: the leaf saw it


def test_synthetic_node_whose_hcas_hang_from_different_leaves_and_one_rail(tmp_path):
    text = synth_ibnetdiscover({"leaf1": ["n1"], "leaf2": ["n2"]}, ["spine1"],
                               hcas={"n3": [("mlx5_0", "leaf1"), ("mlx5_1", "leaf2")]})
    p = write(tmp_path, text)
    rc, d, _ = doc(p)
    assert rc == 1 and kinds(d) == ["split-node"]
    assert d["findings"][0]["message"] == "node n3's HCAs hang from different leaves: leaf1, leaf2"
    rc, d, _ = doc(p, "--hca", "mlx5_0")                 # one rail: n3 is under leaf1 only
    assert rc == 0 and d["nodes"]["n3"]["leaf"] == "leaf1" and len(d["nodes"]["n3"]["hcas"]) == 1


def test_nodes_slurm_has_that_the_fabric_does_not_and_the_reverse(tmp_path):
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3", "gpu9"]}, ["spine1"]))
    rc, d, _ = doc(p, "--slurm-nodes", "n[1-4]")
    assert rc == 1
    assert [f["message"] for f in d["findings"]] == ["node n4 is in Slurm but the fabric does not show it",
                                                     "node gpu9 is on the fabric but not in Slurm"]
    rc, out, _ = fabric("--ibnetdiscover", p, "--slurm-nodes", "n[1-4]", "--topology-conf")
    assert "gpu9" not in out                              # Slurm would refuse a node it does not know
    assert fabric("--ibnetdiscover", p, "--slurm-nodes", "n[1-3],gpu9")[0] == 0


def test_unnamed_hca_needs_a_guid_map(tmp_path):
    text = synth_ibnetdiscover({"leaf1": ["n1", "MT4115"]}).replace('"MT4115 mlx5_0"', '"MT4115 ConnectX4 Mellanox Technologies"')
    p = write(tmp_path, text)
    rc, d, _ = doc(p)
    assert rc == 1 and kinds(d) == ["unnamed-hca"] and sorted(d["nodes"]) == ["n1"]
    guid = next(n.guid for n in ibnet.parse(text).nodes.values() if n.desc.startswith("MT4115"))
    gm = write(tmp_path, f"# GUID host\n0x{guid.lstrip('0')} \"n2 HCA-1\"\n", "guids.map")
    rc, d, _ = doc(p, "--guid-map", gm)
    assert rc == 0 and sorted(d["nodes"]) == ["n1", "n2"]
    bad = write(tmp_path, "0xzz n2\n", "bad.map")
    rc, out, err = fabric("--ibnetdiscover", p, "--guid-map", bad)
    assert rc == 2 and f"{bad}:1:" in err


def test_synthetic_port_lines_without_port_guids_still_pair_up(tmp_path):
    # SYNTHETIC: port lines without the `(portguid)` parts (older infiniband-diags, hand-trimmed pastes)
    text = ('Switch\t24 "S-0008f10400411f56"\t\t# "ISR9024 Voltaire" base port 0 lid 6 lmc 0\n'
            '[1]\t"H-0002c90200213a61"[1]\t\t# "mtlx01 HCA-1" lid 1 4xDDR\n'
            'Ca\t2 "H-0002c90200213a61"\t\t# "mtlx01 HCA-1"\n'
            '[1]\t"S-0008f10400411f56"[1]\t\t# lid 1 lmc 0 "ISR9024 Voltaire" lid 6 4xDDR\n')
    rc, d, _ = doc(write(tmp_path, text))
    assert rc == 0 and list(d["nodes"]) == ["mtlx01"] and [lk["seen_from"] for lk in d["links"]] == [2]
    assert d["nodes"]["mtlx01"]["hcas"][0]["lid"] == 1


# ---- the topology files ----

def test_topology_conf_and_yaml_of_a_two_level_tree(tmp_path):
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n3"], "leaf2": ["n2"]}, ["spine1"]))
    rc, out, _ = fabric("--ibnetdiscover", p, "--topology-conf")
    assert rc == 0
    assert [ln for ln in out.splitlines() if not ln.startswith("#")] == [
        "SwitchName=leaf1 Nodes=n[1,3]", "SwitchName=leaf2 Nodes=n2", "SwitchName=spine1 Switches=leaf[1-2]"]
    rc, out, _ = fabric("--ibnetdiscover", p, "--topology-yaml")
    assert rc == 0
    assert yaml.safe_load(out) == [{"topology": "fabric", "cluster_default": True, "tree": {"switches": [
        {"switch": "leaf1", "nodes": "n[1,3]"}, {"switch": "leaf2", "nodes": "n2"},
        {"switch": "spine1", "children": "leaf[1-2]"}]}}]


def test_leaves_cabled_to_each_other_without_a_spine_get_a_virtual_top(tmp_path):
    # SYNTHETIC: leaf1 and leaf2 cabled directly; no switch reaches both, so Slurm would never let a job span them
    p = write(tmp_path, synth_ibnetdiscover({"leaf1": ["n1", "n2"], "leaf2": ["n3"]}, isls=[("leaf1", "leaf2")]))
    rc, out, err = fabric("--ibnetdiscover", p, "--topology-conf")
    assert rc == 0, err
    assert [ln for ln in out.splitlines() if not ln.startswith("#")] == [
        "SwitchName=leaf1 Nodes=n[1-2]", "SwitchName=leaf2 Nodes=n3", "SwitchName=fabric-top Switches=leaf[1-2]"]
    assert "# fabric-top is not on the fabric" in out
    d = conf.to_json(tree.build(ibnet.parse(open(p).read())))
    assert [s["virtual"] for s in d["switches"]] == [False, False, True]
    # a fat tree's spines each reach every leaf: no virtual top; two separate fabrics: none either
    for text in (synth_ibnetdiscover({"leaf1": ["n1"], "leaf2": ["n2"]}, ["spine1", "spine2"]),
                 synth_ibnetdiscover({"leaf1": ["n1"], "leaf2": ["n2"]})):
        assert not any(s.virtual for s in tree.build(ibnet.parse(text)).switches.values())


def test_three_levels_and_json_shape(tmp_path):
    text = synth_ibnetdiscover({"l1": ["a1"], "l2": ["a2"]}, ["s1"])
    cap = ibnet.parse(text)
    fab = tree.build(cap)
    d = conf.to_json(fab)
    assert list(d) == ["source", "format", "switches", "levels", "nodes", "unnamed_hcas", "links", "elided_at",
                       "findings", "ok"]
    assert list(d["switches"][0]) == ["name", "guid", "lid", "description", "level", "nodes", "children", "virtual"]
    assert list(d["links"][0]) == ["a", "b", "width", "speed", "rate", "seen_from", "line"]
    assert d["levels"] == {"0": ["l1", "l2"], "1": ["s1"]}


# ---- bad input: exit 2 with file and line ----

def test_capture_cut_inside_a_record_exits_2_with_file_and_line(tmp_path):
    text = synth_ibnetdiscover({"leaf1": ["n1", "n2"]})
    lines = text.splitlines()
    cut = lines[: lines.index("caguid=" + lines[lines.index("devid=0x101b") + 2].split("=")[1]) + 1]
    p = write(tmp_path, "\n".join(cut) + "\n")
    rc, out, err = fabric("--ibnetdiscover", p)
    assert rc == 2 and out == ""
    assert f"{p}:{len(cut)}: the record that starts at line {len(cut) - 3} has no Switch/Ca line" in err
    # cut in the middle of a line
    half = text[: text.index("# lid", text.index("Ca\t1")) + 3]
    p = write(tmp_path, half)
    rc, _, err = fabric("--ibnetdiscover", p)
    assert rc == 2 and f"{p}:{half.count(chr(10)) + 1}: not an ibnetdiscover line" in err


@pytest.mark.parametrize("text,where,what", [
    ("Switch\t36 \"S-0002c9\"\t\t# \"sw\" enhanced port 0 lid 1 lmc 0\n" + "[1]\t" + "x" * 5000 + "\n", 2,
     "over the limit"),
    ("vendid=0x2c9\n\x00\x01\x02\n", 2, "NUL byte"),
    ('[1]\t"H-0002c903000d81f8"[1](2c903000d81f9) \t\t# "n1 HCA-1" lid 4 4xEDR\n', 1, "before its Switch/Ca line"),
    ("CA: n1 HCA-1:\n      0x0002c903000d81f9      4    1[  ] ==( 4X 10.0 Gbps Active/  LinkUp)==>  garbage\n", 2,
     "unreadable peer"),
    ("CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib' )\n"
     "SW  1719 10 0x7cfe9003009ce5b0 4x EDR - CA\n", 2, "not an `ibnetdiscover -p` line"),
    ("\n\n# only comments\n", None, "no fabric in this capture"),
])
def test_hostile_input_exits_2_naming_file_and_line(tmp_path, text, where, what):
    p = write(tmp_path, text)
    rc, out, err = fabric("--ibnetdiscover", p)
    assert rc == 2 and what in err, err
    assert (f"{p}:{where}:" if where else f"{p}:") in err
    assert "Traceback" not in err


def test_size_bound_and_stdin(tmp_path):
    with pytest.raises(ibnet.ParseError, match="over the limit of 100"):
        ibnet.parse("x" * 101, "big.txt", limit=100)
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli", "fabric", "--ibnetdiscover", "-", "--json"],
                       input=QDR.read_text(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["source"] == "<stdin>"


def test_live_ibnetdiscover_missing_is_exit_3(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    rc, out, err = fabric()
    assert rc == 3 and "could not run ibnetdiscover" in err


def test_live_ibnetdiscover_runs_with_a_timeout(tmp_path, monkeypatch):
    fake = tmp_path / "ibnetdiscover"
    fake.write_text(f"#!/bin/sh\ncat {OSC}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    rc, d = fabric("--json")[0], json.loads(fabric("--json")[1])
    assert rc == 1 and d["source"] == "ibnetdiscover" and d["format"] == "ibnetdiscover-ports"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    rc, _, err = fabric("--timeout", "1")
    assert rc == 3 and "timed out after 1s" in err
