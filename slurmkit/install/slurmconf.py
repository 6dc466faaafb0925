"""The slurm.conf lines the installed hooks need, and which of them the running cluster lacks.

`scontrol show config` prints `Key                     = value` lines; parse_show_config reads them. Slurm 24.11+
allows several Prolog/Epilog scripts and prints them indexed (`Prolog[0] = ...`, `Prolog[1] = ...`; 22.05 prints
`Prolog = ...`): the required hook is there when it is any one of them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    key: str
    value: str
    why: str

    @property
    def text(self) -> str:
        return f"{self.key}={self.value}"


def required_lines(prolog: str, epilog: str, timeout: int) -> list[Line]:
    return [
        Line("Prolog", prolog, "run the installed prolog before every job"),
        Line("Epilog", epilog, "run the installed epilog after every job"),
        Line("PrologFlags", "Alloc", "run the prolog at allocation, for srun/salloc jobs too"),
        Line("PrologEpilogTimeout", str(timeout), "bound the hooks (Slurm's default is no limit)"),
        Line("SchedulerParameters", "nohold_on_prolog_fail",
             "a job whose prolog failed runs elsewhere at once instead of being held"),
    ]


def parse_show_config(text: str) -> dict[str, str]:
    """Key -> value; an indexed key (`Prolog[1]`) is kept as it is, and its first script also as `Prolog`."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            out.setdefault(key, value.strip())
            base, bracket, _ = key.partition("[")
            if bracket and base:
                out.setdefault(base, value.strip())
    return out


def _scripts(conf: dict[str, str], key: str) -> list[str]:
    """Every script configured under `key` (Prolog, Epilog), in Slurm's order."""
    index = {int(k[len(key) + 1:-1]): v for k, v in conf.items()
             if k.startswith(key + "[") and k.endswith("]") and k[len(key) + 1:-1].isdigit()}
    return [index[i] for i in sorted(index)] or ([conf[key]] if key in conf else [])


def missing(lines: list[Line], conf: dict[str, str]) -> list[tuple[Line, str]]:
    """(line, what the cluster has) for each required line the cluster's config does not satisfy."""
    out = []
    for ln in lines:
        have = conf.get(ln.key)
        if ln.key in ("PrologFlags", "SchedulerParameters"):
            items = {i.strip().split("=")[0].lower() for i in (have or "").split(",")}
            ok = ln.value.lower() in items
        elif ln.key == "PrologEpilogTimeout":
            ok = have not in (None, "", "(null)", "65534")   # 65534: Slurm's "no timeout"
        elif ln.key in ("Prolog", "Epilog"):
            scripts = _scripts(conf, ln.key)
            ok = ln.value in scripts
            have = ", ".join(scripts) if scripts else None
        else:
            ok = have == ln.value
        if not ok:
            out.append((ln, have if have is not None else "(not set)"))
    return out


def cluster_config(settings) -> dict[str, str]:
    """`scontrol show config` through slurmkit.proc with the Slurm timeout; raises CommandError."""
    import os

    from .. import proc
    scontrol = os.path.join(settings.slurm.bin_dir, "scontrol") if settings.slurm.bin_dir else "scontrol"
    return parse_show_config(proc.run([scontrol, "show", "config"], timeout=settings.slurm.timeout).stdout)
