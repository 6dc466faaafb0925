# Placement that knows the fabric (issue 33): the InfiniBand switch tree from a real ibnetdiscover capture, a
# topology.conf for topology/tree, and what the fabric says is wrong (exit 1 with findings).
step "slurmkit fabric: the switch tree of a real iblinkinfo capture (a QDR leaf, 4 hosts; down/polling ports are not faults)"
$sk fabric --ibnetdiscover tests/fixtures/ib/qdr-infiniscale-iv-4hca-iblinkinfo-32-ports-down-polling-4space-ca-indent.txt
step "slurmkit fabric --topology-conf: Slurm's topology/tree lines from a real NDR200 capture whose tail was cut (said as a finding)"
$sk fabric --ibnetdiscover tests/fixtures/ib/ndr200-qm9700-split-ports-ibnetdiscover-redacted-guids-omitted-tail.txt \
    --topology-conf || echo "(exit $?: findings)"
