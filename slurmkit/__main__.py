"""`python -m slurmkit`: the same as the `slurmkit` command."""

from slurmkit.entry import main

main()
