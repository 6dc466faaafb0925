"""The hook agent on an installed node (the site's `agent.enabled`): where systemd runs the node, install enables
and starts its unit (and restarts it when the unit file changed: a new socket, a new venv); where it does not (a
container, a per-node root), install says how to run it (the unit's ExecStart). A site without `agent.enabled`
gets no unit enabled (the unit file is still installed, and the installed hooks never look for the agent).
`slurmkit install --uninstall` stops and disables it (uninstall.py).

Every systemctl runs over the install's transport with install.command_timeout, as every other remote command."""

from __future__ import annotations

import posixpath
import shlex

from .bundle import agent_argv
from .layout import Layout
from .plan import Change
from .ssh import NodeError


def has_systemd(t, lay: Layout) -> bool:
    """systemd runs the node, and the install's root is the node's own / (a per-node root is a test or a chroot)."""
    return lay.root in ("", "/") and t.stat("/run/systemd/system").kind == "dir"


def start_commands(unit: str, unit_changed: bool) -> list[list[str]]:
    """What brings the agent up to date: a changed unit file is reloaded and the agent restarted (its socket or
    venv may be new; a restart never kills a hook in flight: KillMode=process); else enabled and started (pure)."""
    if unit_changed:
        return [["systemctl", "daemon-reload"], ["systemctl", "enable", unit], ["systemctl", "restart", unit]]
    return [["systemctl", "enable", "--now", unit]]


def how_to_run(lay: Layout) -> str:
    """The note for a node without systemd: the unit's ExecStart, to run as root under the site's supervisor."""
    return f"no systemd on the node: run the hook agent as root: SLURMKIT_CONFIG={shlex.quote(lay.config)} " + " ".join(
        shlex.quote(a) for a in agent_argv(lay)
    )


def ensure_agent(t, lay: Layout, res, dry_run: bool, timeout: float) -> None:
    """After a node's install (push.run_node): the agent enabled and running where the site enables it."""
    if not (lay.agent_enabled and lay.agent_unit) or res.status in ("failed", "refused", "held"):
        return
    if not has_systemd(t, lay):
        res.note = "; ".join(n for n in (res.note, how_to_run(lay)) if n)
        return
    unit = posixpath.basename(lay.agent_unit)
    changed = any(c.path == lay.agent_unit for c in res.changes)
    if not changed:
        enabled = t.run(["systemctl", "is-enabled", "--quiet", unit], timeout=timeout).returncode == 0
        active = t.run(["systemctl", "is-active", "--quiet", unit], timeout=timeout).returncode == 0
        if enabled and active:
            return
    cmds = start_commands(unit, changed)
    res.changes.append(Change("start-agent", lay.agent_unit, " && ".join(" ".join(c) for c in cmds)))
    if dry_run:
        res.status = "would-change" if res.status == "unchanged" else res.status
        return
    for argv in cmds:
        r = t.run(argv, timeout=timeout)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()
            raise NodeError(f"{' '.join(argv)}: {last[-1] if last else f'exit code {r.returncode}'}")
    if res.status == "unchanged":
        res.status = "changed"
