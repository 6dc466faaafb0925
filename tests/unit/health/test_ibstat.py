"""The ib check's port reader: `ibstat` text and the host ports of fabric captures (slurmkit/health/ibstat.py).

No real `ibstat` capture is in ../shared/fixtures (PROVENANCE.md: the QDR notes held one, re-indented with spaces,
and it was not kept): every ibstat text here is synthetic, written to the layout of rdma-core's
infiniband-diags/ibstat.c (`CA 'name'`, a tab before the CA fields, two before each port's; `CA: 'name'` and no
indentation for `ibstat CA PORT`; `Rate: 2.5` for 1x SDR, `Rate: 40 (FDR10)`), and named synthetic. The fabric
captures are the real ones in tests/fixtures/ib/."""
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmkit.errors import ParseError, UsageError
from slurmkit.fabric import ibnet
from slurmkit.health import ibstat

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "ib"


def synthetic_ibstat(ports, ca_type="MT4129", indent="\t") -> str:
    """ibstat's layout for [(hca, port, state, phys, rate, link layer)], HCAs in order of first appearance."""
    by: dict[str, list] = {}
    for p in ports:
        by.setdefault(p[0], []).append(p)
    out = ""
    for hca, ps in by.items():
        i1, i2 = indent, indent * 2
        out += (f"CA '{hca}'\n{i1}CA type: {ca_type}\n{i1}Number of ports: {len(ps)}\n"
                f"{i1}Firmware version: 28.39.1002\n{i1}Hardware version: 0\n{i1}Node GUID: 0x946dae0300a1b2c3\n"
                f"{i1}System image GUID: 0x946dae0300a1b2c3\n")
        for _, n, state, phys, rate, layer in ps:
            out += (f"{i1}Port {n}:\n{i2}State: {state}\n{i2}Physical state: {phys}\n{i2}Rate: {rate}\n"
                    f"{i2}Base lid: 12\n{i2}LMC: 0\n{i2}SM lid: 1\n{i2}Capability mask: 0xa751e848\n"
                    f"{i2}Port GUID: 0x946dae0300a1b2c3\n{i2}Link layer: {layer}\n")
    return out


NDR8 = [(f"mlx5_{i}", 1, "Active", "LinkUp", "400", "InfiniBand") for i in range(8)]


def test_synthetic_ibstat_of_eight_ndr_hcas():
    cas = ibstat.parse(synthetic_ibstat(NDR8))
    assert [c.name for c in cas] == [f"mlx5_{i}" for i in range(8)] and all(c.nports == 1 for c in cas)
    ps = ibstat.ports(cas)
    assert [(p.hca, p.port, p.state, p.phys, p.rate, p.link_layer) for p in ps][:1] == [
        ("mlx5_0", 1, "Active", "LinkUp", 400.0, "InfiniBand")]
    assert all(p.up and p.active for p in ps) and ps[3].line == 3 * 17 + 8


def test_synthetic_reindented_with_spaces_and_the_one_port_form_read_alike():
    tabs = ibstat.ports(ibstat.parse(synthetic_ibstat(NDR8[:2])))
    spaces = ibstat.ports(ibstat.parse(synthetic_ibstat(NDR8[:2], indent="    ")))
    assert [(p.hca, p.port, p.state, p.rate) for p in tabs] == [(p.hca, p.port, p.state, p.rate) for p in spaces]
    one = "CA: 'mlx5_3'\nPort 1:\nState: Down\nPhysical state: Polling\nRate: 10\nBase lid: 65535\nLink layer: InfiniBand\n"
    (p,) = ibstat.ports(ibstat.parse(one))
    assert (p.hca, p.port, p.state, p.phys, p.up, p.active) == ("mlx5_3", 1, "Down", "Polling", False, False)


def test_synthetic_rates_of_1x_sdr_and_fdr10_and_an_ethernet_port():
    text = synthetic_ibstat([("mlx4_0", 1, "Active", "LinkUp", "2.5", "InfiniBand"),
                             ("mlx4_0", 2, "Active", "LinkUp", "40 (FDR10)", "InfiniBand"),
                             ("mlx5_1", 1, "Active", "LinkUp", "100", "Ethernet")])
    a, b, c = ibstat.ports(ibstat.parse(text))
    assert (a.rate, b.rate, b.fdr10, b.rate_text, c.link_layer) == (2.5, 40.0, True, "40 Gb/s (FDR10)", "Ethernet")


def test_no_output_is_no_hca_and_an_older_ibstat_without_link_layer_reads():
    assert ibstat.parse("") == [] and ibstat.parse("\n\n") == []
    old = synthetic_ibstat(NDR8[:1]).replace("\t\tLink layer: InfiniBand\n", "")
    (p,) = ibstat.ports(ibstat.parse(old))
    assert p.link_layer == "InfiniBand" and p.active


@pytest.mark.parametrize("cut, line, what", [
    (lambda t: t.replace("\t\tRate: 400\n", ""), 8, "port 1 has no Rate"),
    (lambda t: t.split("\tPort 1:")[0], 1, "Number of ports: 1 but 0"),
    (lambda t: t.replace("Number of ports: 1", "Number of ports: 2"), 1, "cut short"),
    (lambda t: t.replace("\t\tSM lid: 1\n", "\t\tSM lid 1\n"), 14, "not an ibstat line"),
    (lambda t: "Infiniband device 'mlx5_0' port 1 status:\n" + t, 1, "HCA header"),
    (lambda t: t.replace("Rate: 400", "Rate: fast"), 11, "not a number"),
    (lambda t: t.replace("CA type", "CA\x00type"), 2, "NUL"),
    (lambda t: t.replace("Firmware version: 28.39.1002", "Firmware version: " + "9" * 5000), 4, "over the limit"),
    (lambda t: t.replace("Number of ports: 1", "Number of ports: many"), 3, "not a count"),
])
def test_synthetic_cut_or_foreign_ibstat_is_refused_with_its_line(cut, line, what):
    with pytest.raises(ParseError, match=what) as e:
        ibstat.parse(cut(synthetic_ibstat(NDR8[:1])), "ticket.txt")
    assert (e.value.path, e.value.line) == ("ticket.txt", line)


def test_every_real_fabric_capture_gives_its_host_ports_once():
    expected = {  # host ports, hosts, rate
        "edr-sb7700-3host-iblinkinfo-grep-up.txt": (3, {"n01", "n02", "mgt"}, {100.0}),
        "ndr200-qm9700-split-ports-ibnetdiscover-redacted-guids-omitted-tail.txt":
            (5, {f"tj01-4090-node00{i}" for i in (4, 5, 6, 7, 9)}, {200.0}),
        "osc-edr-ibnetdiscover-p-ports-subset-node-name-map-4x-unknown-speed-port.txt":
            (3, {"o0001", "o0002", "p0001"}, {100.0}),
        "qdr-infiniscale-iv-4hca-iblinkinfo-32-ports-down-polling-4space-ca-indent.txt":
            (4, {"centos-data-200", "centos-data-201", "centos-data-202", "kube-node-100"}, {40.0}),
    }
    assert {p.name for p in FIX.iterdir()} == set(expected)
    for name, (n, hosts, rates) in expected.items():
        ps = ibstat.from_fabric(ibnet.parse((FIX / name).read_text()))
        assert (len(ps), {p.host for p in ps}, {p.rate for p in ps}) == (n, hosts, rates), name
        assert all(p.up and p.active for p in ps), name


def test_iblinkinfo_keeps_each_ports_logical_and_physical_state():
    cap = ibnet.parse((FIX / "qdr-infiniscale-iv-4hca-iblinkinfo-32-ports-down-polling-4space-ca-indent.txt").read_text())
    states = {(s.port_state, s.phys_state) for s in cap.sightings}
    assert states == {("Active", "LinkUp"), ("Down", "Polling")}
    # the 32 empty ports are the switch's: no host port among them
    assert all(p.phys == "LinkUp" for p in ibstat.from_fabric(cap))


def test_node_descriptions_split_into_host_and_hca():
    assert ibstat.split_desc("n02 HCA-1") == ("n02", "HCA-1")
    assert ibstat.split_desc("tj01-4090-node005 mlx5_2") == ("tj01-4090-node005", "mlx5_2")
    assert ibstat.split_desc("MT25408 ConnectX Mellanox Technologies") == ("MT25408 ConnectX Mellanox Technologies", "")


_STATE = st.sampled_from(["Active", "Down", "Initializing", "Armed", "???"])
_PHYS = st.sampled_from(["LinkUp", "Polling", "Disabled", "Sleep", "LinkErrorRecovery", "PortConfigurationTraining"])
_RATE = st.sampled_from(["2.5", "10", "20", "40", "40 (FDR10)", "56", "100", "200", "400", "800"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(1, 2), _STATE, _PHYS, _RATE,
                          st.sampled_from(["InfiniBand", "Ethernet"])), min_size=1, max_size=12,
                unique_by=lambda t: (t[0], t[1])),
       st.sampled_from(["\t", "  ", "    "]))
def test_any_synthetic_ibstat_reads_back_port_by_port(ports, indent):
    rows = [(f"mlx5_{h}", n, s, ph, r, ll) for h, n, s, ph, r, ll in ports]
    got = ibstat.ports(ibstat.parse(synthetic_ibstat(rows, indent=indent)))
    want = sorted((h, n, s, ph, float(r.split()[0]), ll) for h, n, s, ph, r, ll in rows)
    assert sorted((p.hca, p.port, p.state, p.phys, p.rate, p.link_layer) for p in got) == want


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=400)
       | st.lists(st.sampled_from(["CA 'mlx5_0'", "\tPort 1:", "\t\tState: Active", "\t\tRate: 400", "Rate: x",
                                   "\tNumber of ports: 2", "\t\tPhysical state: LinkUp", "CA: 'x'", "", "junk",
                                   "\tCA type: MT4129", "Port 99999:"]), max_size=20).map("\n".join))
def test_hostile_text_is_read_or_refused_never_a_crash(text):
    try:
        ibstat.parse(text)
    except ParseError as e:
        assert isinstance(e, UsageError) and e.line is not None


def test_a_huge_capture_is_refused_in_bounded_time():
    import time
    t0 = time.monotonic()
    with pytest.raises(ParseError, match="more than 1024 HCAs"):
        ibstat.parse(synthetic_ibstat([(f"mlx5_{i}", 1, "Active", "LinkUp", "400", "InfiniBand") for i in range(1100)]))
    with pytest.raises(ParseError, match="over the limit"):
        ibstat.parse("CA 'mlx5_0'\n\tCA type: " + "x" * 10**6)
    assert time.monotonic() - t0 < 5
