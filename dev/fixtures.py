#!/usr/bin/env python3
"""Copy real captures from ../shared/fixtures into tests/fixtures, byte for byte, with their provenance rows.

    python3 dev/fixtures.py add slurm/rocky9-3node-quadro-p1000-scontrol-show-node-o.txt [more ...]
    python3 dev/fixtures.py check      # every copied fixture is identical to its source

Never edit a copied fixture: a case we need and do not have is synthesized in the test and named synthetic.
"""
import filecmp
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["add"]:
        add(sys.argv[2:])
    elif sys.argv[1:2] == ["check"]:
        check()
    else:
        sys.exit(__doc__)
