"""ecc: volatile uncorrectable errors, aggregate SRAM uncorrectable over the RMA threshold, row remapping pending
or failed, retired pages pending (pending page blacklist), Blackwell channel repair pending / unrepairable
memory, and ECC mode "Unknown Error". Input: `nvidia-smi -q` text (any layout, drivers 418-590) or
`--query-gpu` / `--query-remapped-rows` CSV."""

from __future__ import annotations

from .. import nvsmi
from ..base import Result, is_na, live_unreadable, is_unknown_error, is_yes, to_int
from ..context import NoData

NAME = "ecc"


def _gpu_findings_q(tree, s) -> tuple[list[str], dict]:
    f: list[str] = []
    ev: dict = {}
    mode = tree.get_ci("ECC Mode", "Current")
    ev["mode"] = mode
    if is_unknown_error(mode):
        f.append("ECC mode reads 'Unknown Error'")
    elif s.require_ecc_enabled and mode and mode.lower() == "disabled":
        f.append("ECC is disabled")
    errs = tree.get_ci("ECC Errors")
    vol_unc = agg_sram = None
    flat_unc: list[int] = []
    if isinstance(errs, nvsmi.Node):
        for path, v in errs.walk():
            p = [x.split(" #")[0].lower() for x in path]
            if is_unknown_error(v):
                f.append(f"ECC counter {' / '.join(path)} reads 'Unknown Error'")
                continue
            n = to_int(v)
            if n is None:
                continue
            section = p[0]
            leaf = p[-1]
            # new layout: "SRAM Uncorrectable[ Parity| SEC-DED]", "DRAM Uncorrectable"; old: "Double Bit" block
            unc = "uncorrectable" in leaf or ("double bit" in p and leaf == "total")
            if not unc:
                continue
            if section == "volatile":
                vol_unc = (vol_unc or 0) + n
            elif section == "aggregate" and "sram" in leaf:
                agg_sram = (agg_sram or 0) + n
    else:
        # a flat excerpt (`nvidia-smi -q | grep -i correctable`): no section names to tell volatile from aggregate
        for path, v in tree.walk():
            n = to_int(v) if "uncorrectable" in path[-1].lower() else None
            if n is not None:
                flat_unc.append(n)
    ev.update({"volatile_uncorrectable": vol_unc, "aggregate_sram_uncorrectable": agg_sram})
    if vol_unc is not None and vol_unc > s.volatile_uncorrectable_max:
        f.append(f"{vol_unc} volatile uncorrectable ECC errors")
    if agg_sram is not None and agg_sram > s.aggregate_sram_uncorrectable_max:
        f.append(f"{agg_sram} aggregate SRAM uncorrectable errors (> {s.aggregate_sram_uncorrectable_max})")
    if flat_unc:
        ev["uncorrectable_unknown_section"] = flat_unc
        if any(n > s.volatile_uncorrectable_max for n in flat_unc):
            f.append(f"uncorrectable ECC errors {flat_unc} (section not shown)")
    rp = tree.get_ci("Retired Pages")
    if isinstance(rp, nvsmi.Node):
        pend = rp.get_ci("Pending Page Blacklist") or rp.get_ci("Pending")
        ev["retired_pages_pending"] = pend
        if s.fail_on_retired_pending and is_yes(pend):
            f.append("retired pages pending (GPU reset needed)")
    rr = tree.get_ci("Remapped Rows")
    if isinstance(rr, nvsmi.Node):
        pend, fail = rr.get_ci("Pending"), rr.get_ci("Remapping Failure Occurred")
        ev["remap_pending"], ev["remap_failure"] = pend, fail
        if s.fail_on_remap_pending and is_yes(pend):
            f.append("row remapping pending (GPU reset needed)")
        if is_yes(fail):
            f.append("row remapping failure (RMA)")
    for key, msg in (
        ("Channel Repair Pending", "channel repair pending (GPU reset needed)"),
        ("Unrepairable Memory", "unrepairable memory (RMA)"),
    ):
        v = (errs.get_ci(key) if isinstance(errs, nvsmi.Node) else None) or tree.get_ci(key)
        if isinstance(v, str):  # a value; a section of that name (junk, a paste) is not one
            ev[key.lower().replace(" ", "_")] = v
            if is_yes(v):
                f.append(msg)
    return f, ev


def _csv_findings(row: dict, s) -> tuple[list[str], dict]:
    f: list[str] = []
    ev: dict = {}
    for col, v in row.items():
        c = col.lower()
        if is_unknown_error(v):
            f.append(f"{col} reads 'Unknown Error'")
            continue
        n = to_int(v)
        if c.startswith("ecc.errors.uncorrected.volatile") and n is not None:
            if c.endswith(".total") or not any(k.startswith("ecc.errors.uncorrected.volatile.total") for k in row):
                ev[col] = n
                if n > s.volatile_uncorrectable_max:
                    f.append(f"{n} volatile uncorrectable ECC errors ({col})")
        elif c.startswith("ecc.errors.uncorrected.aggregate") and "sram" in c and n is not None:
            ev[col] = n
            if n > s.aggregate_sram_uncorrectable_max:
                f.append(f"{n} aggregate SRAM uncorrectable errors")
        elif c in ("remapped_rows.pending", "retired_pages.pending"):
            ev[col] = v
            if is_yes(v) and (s.fail_on_remap_pending if "remapped" in c else s.fail_on_retired_pending):
                f.append(f"{c.split('.')[0].replace('_', ' ')} pending (GPU reset needed)")
        elif c == "remapped_rows.failure":
            ev[col] = v
            if is_yes(v):
                f.append("row remapping failure (RMA)")
        elif c in ("remapped_rows.uncorrectable", "remapped_rows.correctable"):
            ev[col] = n
    return f, ev


_ECC_COLS = ("ecc.", "remapped_rows.", "retired_pages.")


def evaluate(text: str, s, columns: list[str] | None = None) -> Result:
    per_gpu: list[dict] = []
    findings: list[str] = []
    if columns is not None or nvsmi.looks_like_csv(text):
        rows = nvsmi.parse_csv(text, columns)
        if not rows or not any(c.lower().startswith(_ECC_COLS) for c in rows[0]):
            raise NoData("no ECC fields in this CSV (expected ecc.*, remapped_rows.* or retired_pages.* columns)")
        for i, row in enumerate(rows):
            gid = row.get("gpu_uuid") or row.get("pci.bus_id") or row.get("index") or str(i)
            f, ev = _csv_findings(row, s)
            per_gpu.append({"gpu": gid, **ev})
            findings += [f"GPU {gid}: {x}" for x in f]
    else:
        q = nvsmi.parse_q(text)
        if not q["gpus"]:
            if q["errors"]:
                return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code="ecc")
            raise NoData("no ECC section in this input (expected `nvidia-smi -q` output)")
        found_any = False
        for g in q["gpus"]:
            f, ev = _gpu_findings_q(g["tree"], s)
            gid = nvsmi.short_bus(g["bus_id"]) or "?"
            # an all-N/A GPU says nothing; nor does a section header where a value belongs
            if any(
                (isinstance(v, list) and v) or (isinstance(v, (str, int)) and (not is_na(v) or is_unknown_error(v)))
                for v in ev.values()
            ):
                found_any = True
            per_gpu.append({"gpu": gid, **ev})
            findings += [f"GPU {gid}: {x}" for x in f]
        if not found_any:
            if q["errors"]:
                return Result(NAME, "fail", f"nvidia-smi: {q['errors'][-1]}", {"errors": q["errors"]}, code="ecc")
            raise NoData("no ECC fields in this input (or every ECC field reads N/A)")
    ev = {"gpus": per_gpu}
    if findings:
        ev["findings"] = findings
        return Result(NAME, "fail", "; ".join(findings), ev, code="ecc")
    return Result(NAME, "ok", f"{len(per_gpu)} GPUs: no ECC findings", ev)


def run(ctx) -> Result:
    text = ctx.text(NAME, "q")
    bad = live_unreadable(ctx, NAME, "nvidia-smi -q", nvsmi.unreadable(text))
    return bad if bad is not None else evaluate(text, ctx.settings.ecc)
