#!/usr/bin/env python3
"""Copy real captures from ../shared/fixtures into tests/fixtures, byte for byte, with their provenance rows.

    python3 dev/fixtures.py add slurm/rocky9-3node-quadro-p1000-scontrol-show-node-o.txt [more ...]
    python3 dev/fixtures.py check      # every copied fixture is identical to its source
    .venv/bin/python dev/fixtures.py grade [--json] [--quiet]   # what slurmkit decides on every fixture with a
                                                                # verdict (--quiet: only misses, false drains)

`grade` runs the checks on every kernel-log, nvidia-smi and NCCL fixture whose provenance row states a verdict
(state "faulty..." or "healthy...") and prints faulty caught / faulty MISSED / healthy passed / healthy FAILED
(a false drain), with the reason; it exits 1 on any miss or false drain. A fixture graded under site settings
(dev/grade-settings.json: a site that runs such a machine sets them) says so in its row.

Never edit a copied fixture: a case we need and do not have is synthesized in the test and named synthetic.
"""
import filecmp
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = (REPO.parent / "shared" / "fixtures")
DEST = REPO / "tests" / "fixtures"
# not PROVENANCE.md: that name belongs to ../shared/fixtures, and a copied fixture must match its source
PROV = "FIXTURES-PROVENANCE.md"
HEADER = """# Provenance of the fixtures

Files under a category folder (ecc/, nccl/, slurm/, topo/, xid/, lscpu/, misc/, dcgm/) are real captures copied
byte for byte from `../shared/fixtures/` with `python3 dev/fixtures.py add`; their rows below are copied from
`../shared/fixtures/PROVENANCE.md`. Files under `local/` were captured by slurmkit's own tests on the dev cluster
(real Slurm 22.05.8 from Debian 12 on this project's CI machine kind); each says how below. Synthetic inputs live
in the tests themselves and are named synthetic there.

| file | source | machine | state | notes |
|---|---|---|---|---|
"""


def rows() -> dict[str, str]:
    out = {}
    for line in (SHARED / "PROVENANCE.md").read_text().splitlines():
        if line.startswith("| ") and "/" in line.split("|")[1]:
            out[line.split("|")[1].strip()] = line
    return out


def add(names):
    prov = DEST / PROV
    if not prov.exists():
        DEST.mkdir(parents=True, exist_ok=True)
        prov.write_text(HEADER)
    text = prov.read_text()
    known = rows()
    for name in names:
        src = SHARED / name
        if not src.is_file():
            sys.exit(f"no such fixture: {src}")
        dst = DEST / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        row = known.get(name)
        if row is None:
            sys.exit(f"{name}: no provenance row in {SHARED / 'PROVENANCE.md'}")
        if f"| {name} |" not in text:
            text += row + "\n"
    prov.write_text(text)


def check():
    bad = []
    for f in DEST.rglob("*"):
        rel = f.relative_to(DEST)
        if f.is_file() and rel.parts[0] not in ("local",) and f.name != PROV:
            src = SHARED / rel
            if src.exists() and not filecmp.cmp(f, src, shallow=False):
                bad.append(str(rel))
    if bad:
        sys.exit("fixtures differ from ../shared/fixtures: " + ", ".join(bad))
    rows = (DEST / PROV).read_text()
    missing = [str(f.relative_to(DEST)) for f in sorted(DEST.rglob("*"))
               if f.is_file() and f.name != PROV and f"| {f.relative_to(DEST)} |" not in rows]
    if missing:
        sys.exit(f"fixtures without a provenance row in tests/fixtures/{PROV}: " + ", ".join(missing))
    print("fixtures identical to their sources")


# --- grade: what slurmkit decides on every real capture that states a verdict --------------------------------

# every check that reads an nvidia-smi capture (`-q`, `nvlink -s`), from the check registry
SMI_SOURCES = ("q", "nvlink_s")


def _verdict(state: str) -> str | None:
    s = state.strip().lower()
    return "faulty" if s.startswith("faulty") else "healthy" if s.startswith("healthy") else None


def _kind(name: str, row: str, text: str) -> str | None:
    from slurmkit.health.kernlog import events, logline
    top = name.split("/", 1)[0]
    if top not in ("xid", "nccl", "ecc", "misc", "dcgm", "gpuutil", "ib"):
        return None                        # topology, CPU layout, Slurm output: no health check reads them
    if top in ("nccl", "ib"):
        return top
    if top == "xid" and (logline.records(text, events.builtin_keywords()) or "nvidia-smi" not in row):
        return "kernel-log"
    # a row that names nvidia-smi, or a `-q` Fabric block pasted alone (azhpc-506's row names no tool)
    fabric_block = re.search(r"^[ \t]*Fabric[ \t]*\n[ \t]+State[ \t]+:", text, re.M)
    return "nvidia-smi" if "nvidia-smi" in row or fabric_block else None


def _settings(overrides: dict):
    from slurmkit import config
    s = config.Settings()
    for section, kv in overrides.items():
        if section == "why":
            continue
        for k, v in kv.items():
            setattr(getattr(s, section), k, v)
    return s


def _decide(kind: str, text: str, settings) -> tuple[str, str, list[str]]:
    """(status, reason, checks that read it): the worst verdict of every check that can read the input."""
    from slurmkit.errors import UsageError
    from slurmkit.health.base import worst
    from slurmkit.health.runner import run_checks
    from slurmkit.health.checks.registry import CHECKS
    smi = tuple(c.name for c in CHECKS if c.source in SMI_SOURCES)
    names = {"kernel-log": ("xid",), "nccl": ("nccl",), "ib": ("ib",), "nvidia-smi": smi}[kind]
    results = []
    for n in names:
        try:
            results += run_checks(settings, "full", captures={n: text}).results
        except UsageError:
            continue                       # this check cannot read this input (another one may)
    if not results:
        return "unread", "no check reads this input", []
    st = worst(r.status for r in results)
    top = next((r for r in results if r.status == st), results[0])
    return st, f"{top.check}: {top.reason}", [r.check for r in results]


def grade(as_json: bool = False, quiet: bool = False) -> int:
    sys.path.insert(0, str(REPO))
    import json
    over_path = REPO / "dev" / "grade-settings.json"
    overrides = json.loads(over_path.read_text()) if over_path.exists() else {}
    out = []
    for line in (DEST / PROV).read_text().splitlines():
        # cells split at the table's own pipes: a `\|` inside a cell (a quoted shell pipeline) is not one
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)]
        if not line.startswith("| ") or len(cells) < 6 or "/" not in cells[1]:
            continue
        name, state = cells[1], cells[4]
        verdict = _verdict(state)
        path = DEST / name
        if verdict is None or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        kind = _kind(name, line, text)
        if kind is None:
            continue
        ov = overrides.get(name, {})
        st, reason, _ = _decide(kind, text, _settings(ov))
        if verdict == "faulty":
            outcome = "faulty caught" if st in ("fail", "warn") else "faulty MISSED"
        else:
            outcome = "healthy FAILED" if st == "fail" else ("healthy passed" if st != "unread" else
                                                            "healthy (not read)")
        out.append({"fixture": name, "kind": kind, "verdict": verdict, "decided": st, "outcome": outcome,
                    "reason": reason, "settings": {k: v for k, v in ov.items() if k != "why"} or None,
                    "settings_why": ov.get("why")})
    bad = [r for r in out if r["outcome"] in ("faulty MISSED", "healthy FAILED")]
    if as_json:
        print(json.dumps({"graded": out, "bad": len(bad)}, indent=1))
    else:
        for r in out:
            if quiet and r not in bad:
                continue
            extra = f"  [graded with {json.dumps(r['settings'])}: {r['settings_why']}]" if r["settings"] else ""
            print(f"{r['outcome']:<18} {r['decided']:<6} {r['kind']:<10} {r['fixture']}\n{'':<18} {r['reason']}"
                  f"{extra}")
        counts: dict[str, int] = {}
        for r in out:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        print("; ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["add"]:
        add(sys.argv[2:])
    elif sys.argv[1:2] == ["check"]:
        check()
    elif sys.argv[1:2] == ["grade"]:
        sys.exit(grade("--json" in sys.argv[2:], "--quiet" in sys.argv[2:]))
    else:
        sys.exit(__doc__)
