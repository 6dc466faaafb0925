"""One module per CLI command (registered in slurmkit.cli.COMMANDS, imported only when that command runs)."""
