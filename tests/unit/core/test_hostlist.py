"""slurmkit/hostlist.py: Slurm hostlist expressions, bounded."""
import pytest

from slurmkit import hostlist
from slurmkit.errors import UsageError


# issue 17 (H1)
def test_h1_hostlist_size_is_known_before_any_name_is_made():
    assert hostlist.count("n[1-99999999]") == 99999999
    assert hostlist.count("n[001-003],gpu[1,3-4]") == 6
    with pytest.raises(UsageError, match="over the limit of 100000"):
        hostlist.expand("n[1-99999999]")
    assert hostlist.expand("n[001-003],gpu7") == ["gpu7", "n001", "n002", "n003"]
    with pytest.raises(UsageError, match="no @groups"):
        hostlist.expand("@all")
