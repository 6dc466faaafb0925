"""The hook agent's module path before it moved to slurmkit/agent/server.py: an agent started as
`python -m slurmkit.hooks.agent` (a unit file or a hand-started agent from an earlier release) re-executes itself
under this name when slurmkit changes on disk, and runs the new agent. Nothing else should start it here."""

import sys

from ..agent.server import main

if __name__ == "__main__":
    sys.exit(main())
