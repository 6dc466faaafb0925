"""Where each installed thing lives on a node. Pure: settings + node name in, absolute paths out."""

from __future__ import annotations

import posixpath
from ..record import Record

PREV = ".slurmkit-prev"  # suffix of the kept previous version of a file (and of the venv link)
COMPLETE = ".slurmkit-bundle"  # file inside a finished venv: the bundle id it was built from
PAYLOAD = "slurmkit-venv.tar.gz"  # the prebuilt venv's tarball, in install.wheel_dir


class Layout(Record, frozen=True, kw_only=False):
    node: str
    root: str
    prolog: str
    epilog: str
    health: str
    config: str
    venv: str
    wheel_dir: str
    stamp: str
    agent_unit: str = ""  # the hook agent's systemd unit; "" when the site installs none
    run_dir: str = ""  # slurmkit's runtime directory (the agent's socket)
    agent_socket: str = "/run/slurmkit/{cluster}/agent.sock"  # the site's agent.socket ({cluster}: the node's)
    agent_enabled: bool = False  # the site's agent.enabled: install starts the agent, the hooks look for it

    def venv_for(self, bundle_id: str) -> str:
        return f"{self.venv}-{bundle_id}"

    @property
    def payload(self) -> str:
        """The prebuilt venv's tarball (install.prebuilt_venv), kept beside the wheels."""
        return posixpath.join(self.wheel_dir, PAYLOAD)

    @property
    def python(self) -> str:
        return posixpath.join(self.venv, "bin", "python")

    @property
    def slurmkit(self) -> str:
        return posixpath.join(self.venv, "bin", "slurmkit")


def _rooted(root: str, path: str) -> str:
    if not root:
        return posixpath.normpath(path)
    return posixpath.normpath(root.rstrip("/") + "/" + path.lstrip("/"))


def layout(install, node: str, agent=None) -> Layout:
    """`install` is config.InstallSettings, `agent` config.AgentSettings (None: the defaults, agent off); `{node}`
    in any path becomes the node's name."""
    root = install.root.replace("{node}", node)

    def p(path: str) -> str:
        return _rooted(root, path.replace("{node}", node))

    hooks = p(install.hooks_dir)
    return Layout(
        node=node,
        root=root,
        prolog=posixpath.join(hooks, "prolog"),
        epilog=posixpath.join(hooks, "epilog"),
        health=posixpath.join(hooks, "health"),
        config=p(install.config_path),
        venv=p(install.venv_dir),
        wheel_dir=p(install.wheel_dir),
        stamp=p(install.stamp_path),
        agent_unit=p(install.agent_unit) if install.agent_unit else "",
        run_dir=p(install.run_dir),
        **({"agent_socket": agent.socket, "agent_enabled": agent.enabled} if agent is not None else {}),
    )
