"""`slurmkit agent status`: is this node's hook agent (slurmkit/agent/server.py) running and answering, and what it
has done (slurmkit/agent/status.py). Exit 0 running and answering, 1 not running or not answering, 3 could
not find out (e.g. the socket is root's and this is not root)."""

from __future__ import annotations

import os
import time

import click

from .ctx import Ctx, pass_ctx


@click.group()
def agent():
    """The node's hook agent: the prolog and epilog run in a child of it (docs/hooks.md)."""


def agent_socket(ctx: Ctx, given: str | None) -> str:
    """--socket, else the site's agent.socket with {cluster} from this node's slurm.conf."""
    from ..agent.client import expand_socket
    from ..nodeconf import slurm_conf

    template = given or ctx.settings.agent.socket
    return os.fsdecode(expand_socket(os.fsencode(template), slurm_conf(os.environb)))


def agent_report(sock: str, timeout: float = 2.0) -> dict:
    """What `status` prints, as a document (`--json`)."""
    from ..agent import status as agent_status

    state, detail = agent_status.probe(sock, timeout)
    out: dict = {"socket": sock, "state": state, "detail": detail, "running": state in ("answering", "not answering")}
    out["answering"] = state == "answering"
    pid = int(detail.split()[1]) if detail.startswith("agent ") and detail.split()[1].isdigit() else None
    try:
        doc = agent_status.read_status(sock)
    except OSError as e:
        doc, out["status_error"] = None, str(e)
    out["status_file"] = agent_status.status_path(sock) if doc is not None else None
    if doc is not None and out["answering"] and (pid is None or doc.get("pid") == pid):
        for k in ("pid", "started", "restarted", "hooks_served", "dropped", "last_error", "updated"):
            out[k] = doc.get(k)
        if isinstance(doc.get("started"), (int, float)):
            out["uptime_s"] = round(time.time() - doc["started"], 1)
    else:
        out["pid"] = pid
        if doc is not None:
            out["stale_status"] = doc  # what an agent that is gone (killed) left: its last counts
    return out


def _when(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if isinstance(t, (int, float)) else "-"


def _span(s: float) -> str:
    s = int(s)
    d, h, m = s // 86400, s // 3600 % 24, s // 60 % 60
    return f"{d}d {h}h" if d else f"{h}h {m}m" if h else f"{m}m {s % 60}s"


def render(r: dict) -> list[str]:
    if r["state"] != "answering":
        what = {"not running": "NOT RUNNING", "not answering": "NOT ANSWERING"}.get(r["state"], "UNKNOWN")
        lines = [f"agent: {what}: {r['detail']}"]
        if r.get("stale_status"):
            st = r["stale_status"]
            lines.append(
                f"last status (pid {st.get('pid')}, {_when(st.get('updated'))}): "
                f"{st.get('hooks_served')} hooks served, {st.get('dropped')} dropped"
            )
        if r["state"] != "unknown":
            lines.append("the prolog and epilog run in their own processes (same verdicts, more CPU per job)")
        return lines
    lines = [f"agent: running, answering on {r['socket']} (pid {r.get('pid') or '-'})"]
    if "hooks_served" not in r:
        lines.append("no status file beside the socket (an agent older than `agent status`): restart it for more")
        return lines
    up = f" (up {_span(r['uptime_s'])})" if "uptime_s" in r else ""
    lines.append(f"started: {_when(r.get('started'))}{up}")
    if r.get("restarted"):
        lines.append(f"restarted itself (slurmkit changed on disk): {_when(r['restarted'])}")
    lines.append(f"hooks served: {r['hooks_served']}; dropped (the client ran the hook itself): {r['dropped']}")
    err = r.get("last_error")
    lines.append(
        f"last error: {_when(err.get('time'))}: {err.get('error')}" if isinstance(err, dict) else "last error: none"
    )
    lines.append(
        "fallbacks a hook took without the agent: slurmd's log and syslog ('running the hook in this process')"
    )
    return lines


@agent.command("status")
@click.option("--socket", "sock", metavar="PATH", help="The agent's socket (default: the site's agent.socket).")
@click.option("--timeout", type=click.FloatRange(0.1, 60), default=2.0, show_default=True, help="Seconds to wait.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def status(ctx: Ctx, sock, timeout, as_json):
    """Is this node's hook agent running and answering: its pid, start, hooks served, requests dropped and last
    error. Exit 0 running and answering, 1 not running or not answering, 3 could not find out."""
    r = agent_report(agent_socket(ctx, sock), timeout)
    if as_json:
        from ..output import emit_json

        emit_json(r)
    else:
        click.echo("\n".join(render(r)))
    return {"answering": 0, "not running": 1, "not answering": 1}.get(r["state"], 3)
