"""The node's hook agent: `server` (the agent process, run as `python -I -m slurmkit.agent.server`), `client` (the
prolog's and epilog's first step: hand the hook to the agent; builtins only) and `status` (what `slurmkit agent
status` reads). Imports nothing: the hooks import `client` on every job."""
