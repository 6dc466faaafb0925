"""The slurm.conf lines the installed hooks need, merged with what the cluster has, and which it lacks.

`scontrol show config` prints `Key                     = value` lines; parse_show_config reads them (24.11+ prints
several Prolog/Epilog scripts indexed, `Prolog[0] = ...`: the required hook is there when it is any one). The advice
is meant to be pasted: list-valued keys (PrologFlags, SchedulerParameters) are printed as the cluster's value with
ours added, never as a line that would drop a site's own parameters. One slurm.conf names one Prolog= path for
every node (Slurm expands no %n there), so a per-node install.root needs a wrapper (wrapper_script) that runs
the node's own hook; install.slurm_prolog/slurm_epilog say which path slurm.conf names.
"""

from __future__ import annotations

import shlex
from ..record import Record

LIST_KEYS = ("PrologFlags", "SchedulerParameters")
NO_TIMEOUT = (None, "", "(null)", "65534")  # 65534: Slurm's "no timeout"


class Line(Record, frozen=True, kw_only=False):
    key: str
    value: str
    why: str

    @property
    def text(self) -> str:
        return f"{self.key}={self.value}"


def required_lines(
    prolog: str,
    epilog: str,
    timeout: int,
    *,
    health: str | None = None,
    health_interval: int = 300,
    health_state: str = "ANY,CYCLE",
) -> list[Line]:
    """The lines the installed hooks need; with `health`, slurmkit's health script as the HealthCheckProgram."""
    extra = (
        []
        if not health
        else [
            Line("HealthCheckProgram", health, "check every node between jobs, draining one that broke while idle"),
            Line("HealthCheckInterval", str(health_interval), "how often (seconds) the health program runs"),
            Line(
                "HealthCheckNodeState",
                health_state,
                "which nodes it runs on (ANY: busy ones too); CYCLE spreads the runs over the interval",
            ),
        ]
    )
    return [
        Line("Prolog", prolog, "run the installed prolog before every job"),
        Line("Epilog", epilog, "run the installed epilog after every job"),
        Line("PrologFlags", "Alloc", "run the prolog at allocation, for srun/salloc jobs too"),
        Line("PrologEpilogTimeout", str(timeout), "bound the hooks (Slurm's default is no limit)"),
        Line(
            "SchedulerParameters",
            "nohold_on_prolog_fail",
            "a job whose prolog failed runs elsewhere at once instead of being held",
        ),
    ] + extra


def parse_show_config(text: str) -> dict[str, str]:
    """Key -> value; an indexed key (`Prolog[1]`) is kept as it is, and its first script also as `Prolog`."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            out.setdefault(key, value.strip())
            base, bracket, _ = key.partition("[")
            if bracket and base:
                out.setdefault(base, value.strip())
    return out


def scripts(conf: dict[str, str], key: str) -> list[str]:
    """Every script configured under `key` (Prolog, Epilog), in Slurm's order: 24.11+ prints several indexed
    (`Prolog[0] = ...`, `Prolog[1] = ...`), 22.05 one `Prolog = ...`."""
    index = {
        int(k[len(key) + 1 : -1]): v
        for k, v in conf.items()
        if k.startswith(key + "[") and k.endswith("]") and k[len(key) + 1 : -1].isdigit()
    }
    return [index[i] for i in sorted(index)] or ([conf[key]] if key in conf else [])


def _items(value: str | None) -> list[str]:
    if value in (None, "(null)"):
        return []
    return [i.strip() for i in value.split(",") if i.strip()]


def _has(ln: Line, have: str | None) -> bool:
    if ln.key in LIST_KEYS:
        return ln.value.lower() in {i.split("=")[0].lower() for i in _items(have)}
    if ln.key == "PrologEpilogTimeout":
        return have not in NO_TIMEOUT
    if ln.key == "HealthCheckInterval":  # scontrol prints `300 sec`
        return (have or "").split(" ")[0] == ln.value
    if ln.key == "HealthCheckNodeState":  # scontrol prints the flags in its own order: CYCLE,ANY
        return {i.upper() for i in _items(have)} == {i.upper() for i in _items(ln.value)}
    return have == ln.value


def _have(conf: dict[str, str], key: str) -> str | None:
    """What the cluster has for `key`; for Prolog/Epilog every configured script, comma-separated."""
    if key in ("Prolog", "Epilog"):
        return ", ".join(scripts(conf, key)) or None
    return conf.get(key)


def missing(lines: list[Line], conf: dict[str, str]) -> list[tuple[Line, str]]:
    """(line, what the cluster has) for each required line the cluster's config does not satisfy; a required
    Prolog/Epilog is there when it is any one of the cluster's scripts."""
    out = []
    for ln in lines:
        have = _have(conf, ln.key)
        ok = ln.value in scripts(conf, ln.key) if ln.key in ("Prolog", "Epilog") else _has(ln, have)
        if not ok:
            out.append((ln, have or "(not set)"))
    return out


def merged(lines: list[Line], conf: dict[str, str] | None) -> list[Line]:
    """The lines to paste: a list-valued key is the cluster's items plus ours; a timeout the cluster already sets
    stays; everything else is ours. conf None (unknown): our lines as they are."""
    if conf is None:
        return list(lines)
    out = []
    for ln in lines:
        have = conf.get(ln.key)
        if ln.key in LIST_KEYS and not _has(ln, have):
            out.append(Line(ln.key, ",".join([*_items(have), ln.value]), ln.why))
        elif ln.key in LIST_KEYS or (ln.key == "PrologEpilogTimeout" and _has(ln, have)):
            out.append(Line(ln.key, have or ln.value, ln.why))
        else:
            out.append(ln)
    return out


def configless(conf: dict[str, str] | None) -> bool:
    """SlurmctldParameters=enable_configless: nodes fetch slurm.conf from the controller; edit it there only."""
    return conf is not None and "enable_configless" in {i.lower() for i in _items(conf.get("SlurmctldParameters"))}


def wrapper_script(which: str, hook_template: str) -> str:
    """A /bin/sh script for slurm.conf's Prolog=/Epilog= that runs this node's installed hook, where the hook's
    path contains {node}: slurmd gives every prolog/epilog SLURMD_NODENAME."""
    parts = [shlex.quote(p) if p else "" for p in hook_template.split("{node}")]
    target = '"$SLURMD_NODENAME"'.join(parts)
    return (
        f"#!/bin/sh\n# slurm.conf's {which.capitalize()}=: runs the {which} `slurmkit install` put under this "
        f'node\'s install.root\nexec {target} "$@"\n'
    )


def cluster_config(settings) -> dict[str, str]:
    """`scontrol show config` through slurmkit.proc with the Slurm timeout; raises CommandError."""
    import os

    from .. import proc

    scontrol = os.path.join(settings.slurm.bin_dir, "scontrol") if settings.slurm.bin_dir else "scontrol"
    return parse_show_config(proc.run([scontrol, "show", "config"], timeout=settings.slurm.timeout).stdout)
