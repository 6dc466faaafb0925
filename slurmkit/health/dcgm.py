"""DCGM output -> plain data: `dcgmi diag` (the text table of DCGM 2.x-4.x, and `-j` JSON) and `dcgmi health -c -j`.

The text table is what admins paste and what DCGM prints by default:

    | Diagnostic                | Result                                         |
    |-----  Deployment  --------+------------------------------------------------|
    | Persistence Mode          | Fail                                           |
    | Error                     | Persistence mode for GPU 0 is currently disab  |
    |                           | led. ...                                       |
    +-----  Integration  -------+------------------------------------------------+
    | pcie                      | Fail                                           |      <- DCGM 4.x: lower case,
    |                           | GPU0: Pass                                     |         per-GPU lines below
    | PCIe                      | Fail - All                                     |      <- DCGM 2.x/3.x

What it must survive (all in the real captures): cells DCGM wraps at a fixed width, mid-word; cells it cuts with
`...`; a paste without the closing border or the "Successfully ran" line; the table printed twice; rows that lost
their closing `|`; a wrapper's line before the table; "Cannot run diagnostic" (MIG modes mixed). Pure functions.
"""

from __future__ import annotations

import json
import re

from ..errors import ParseError

RESULTS = ("pass", "fail", "warn", "skip")
_SECTION = re.compile(r"^[|+]-{3,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+[+|]")
_BORDER = re.compile(r"^\+[-=+]+\+?\s*$")
_GPU_LINE = re.compile(r"GPU\s*(?P<gpu>\d{1,3})\s*:\s*(?P<res>Pass|Fail|Warn|Skip)\b", re.I)
_RESULT = re.compile(r"(?P<res>Pass|Fail|Warn|Skip)(?:\s*-\s*(?P<scope>All|GPUs?\s*:?\s*[\d, ]+))?\s*$", re.I)
_MSG_KEYS = ("warning", "error", "info")
CANNOT_RUN = re.compile(
    r"Cannot run diagnostic|Error: (?:Unable|Cannot) .*diag|MIG.{0,40}(?:mixed|not supported)", re.I
)


class DcgmParseError(ParseError):
    """Input that is not DCGM output this parser knows; `line` is 1-based where known."""

    def __init__(self, msg: str, line: int | None = None):
        super().__init__(msg, line=line)


def _cells(line: str) -> tuple[str, str, bool] | None:
    """(key cell, value cell, value reached the width) of a `| key | value |` row, else None."""
    s = line.rstrip("\n")
    if not s.startswith("|") or _SECTION.match(s):
        return None
    inner = s[1:]
    if "|" not in inner:
        return None
    key, _, rest = inner.partition("|")
    closed = rest.rstrip().endswith("|")
    value = rest.rstrip()[:-1] if closed else rest
    full = len(value.rstrip()) >= len(value) - 2 if closed else False
    return key.strip(), value, full


def _join(prev: str, prev_full: bool, nxt: str) -> str:
    """Reassemble a wrapped cell: DCGM cuts at a fixed width, mid-word, when a line is full."""
    chunk = nxt.strip()
    if not prev:
        return chunk
    return prev + chunk if prev_full else prev + " " + chunk


def parse_diag_text(text: str) -> dict:
    """{"version", "tests": [{"section", "name", "result", "scope", "gpus": {idx: result}, "messages":
    [{"kind", "text"}]}], "tables", "cannot_run"}. Raises DcgmParseError when there is no diag table."""
    tests: list[dict] = []
    meta: dict[str, str] = {}
    section = None
    tables = 0
    cannot = None
    cur_test: dict | None = None
    cur_msg: dict | None = None
    cur_meta: str | None = None
    last_full = False
    seen_keys: set[tuple[str | None, str]] = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line:
            continue
        if CANNOT_RUN.search(line) and cannot is None:
            cannot = line.strip()
        if line.startswith("| Diagnostic") and "Result" in line:
            tables += 1
            if tables == 2:  # the same table printed again: keep the first
                break
            continue
        m = _SECTION.match(line)
        if m:
            section = m.group("name").strip()
            cur_test = cur_msg = None
            cur_meta = None
            continue
        if _BORDER.match(line):
            cur_msg = None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        key, value, full = cells
        v = value.strip()
        if key:
            cur_msg = None
            kl = key.lower()
            if section and section.lower() == "metadata":
                meta[key] = v
                cur_meta = key
                last_full = full
                continue
            if kl in _MSG_KEYS and cur_test is not None:
                cur_msg = {"kind": kl, "text": v}
                cur_test["messages"].append(cur_msg)
                last_full = full
                continue
            if kl in _MSG_KEYS:  # a message before any test: keep it as the table's own
                cur_test = {
                    "section": section,
                    "name": "(table)",
                    "result": "info",
                    "scope": None,
                    "gpus": {},
                    "messages": [],
                }
                tests.append(cur_test)
                cur_msg = {"kind": kl, "text": v}
                cur_test["messages"].append(cur_msg)
                last_full = full
                continue
            r = _RESULT.match(v)
            if (section, key) in seen_keys:
                continue
            seen_keys.add((section, key))
            cur_test = {
                "section": section,
                "name": key,
                "result": r.group("res").lower() if r else "unknown",
                "scope": (r.group("scope") or None) if r else None,
                "gpus": {},
                "messages": [],
                "raw": v,
                "line": n,
            }
            tests.append(cur_test)
            last_full = full
            continue
        # an empty key cell: a per-GPU result (DCGM 4.x), or the next line of a wrapped cell
        g = _GPU_LINE.fullmatch(v)
        if g is not None and cur_test is not None:  # a whole cell "GPU3: Pass" is never wrapped text
            cur_test["gpus"][int(g.group("gpu"))] = g.group("res").lower()
            cur_msg = None
            continue
        if cur_msg is not None:
            cur_msg["text"] = _join(cur_msg["text"], last_full, value)
        elif cur_meta is not None and section and section.lower() == "metadata":
            meta[cur_meta] = _join(meta[cur_meta], last_full, value)
        elif cur_test is not None:
            cur_test["raw"] = _join(cur_test.get("raw", ""), last_full, value)
        last_full = full
    readable = [t for t in tests if t["result"] in RESULTS]
    if not readable and (not tables or not tests):
        if cannot:
            return {"version": None, "tests": [], "tables": 0, "cannot_run": cannot, "metadata": {}}
        raise DcgmParseError("no `dcgmi diag` result table (a `| Diagnostic | Result |` header and test rows)")
    for t in tests:
        t.pop("raw", None)
    return {
        "version": meta.get("DCGM Version"),
        "tests": tests,
        "tables": tables,
        "cannot_run": cannot,
        "metadata": meta,
    }


def parse_diag_json(doc: dict) -> dict:
    """`dcgmi diag -j`: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
    [{"gpu_id"|"entity_id", "status", "warnings"|"info"}]}]}]}} (DCGM 2.x-3.x), and DCGM 4.x's
    {"DCGM Diagnostic": {"test_categories": [...]}} with `entity_group`. Unknown shapes raise."""
    top = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")
    if not isinstance(top, dict) or not isinstance(top.get("test_categories"), list):
        raise DcgmParseError(
            f"unrecognised `dcgmi diag -j` document (keys: {sorted(doc)[:6]}): expected "
            "'DCGM GPU Diagnostic' or 'DCGM Diagnostic' with 'test_categories'"
        )
    tests = []
    for cat in top["test_categories"]:
        if not isinstance(cat, dict):
            raise DcgmParseError("a test category is not an object")
        for t in cat.get("tests") or []:
            if not isinstance(t, dict):
                raise DcgmParseError("a test is not an object")
            gpus: dict[int, str] = {}
            msgs = []
            for r in t.get("results") or []:
                if not isinstance(r, dict):
                    continue
                gid = r.get("gpu_id", r.get("entity_id"))
                st = str(r.get("status", "")).lower()
                if isinstance(gid, (int, str)) and str(gid).isdigit() and str(gid).isascii():
                    gpus[int(gid)] = st
                for kind in ("warnings", "info", "errors"):
                    for w in r.get(kind) or []:
                        text = w.get("warning") or w.get("message") if isinstance(w, dict) else str(w)
                        msgs.append({"kind": kind.rstrip("s"), "text": str(text)})
            overall = str(t.get("status") or "").lower() or (
                "fail"
                if "fail" in gpus.values()
                else "warn"
                if "warn" in gpus.values()
                else "pass"
                if "pass" in gpus.values()
                else "skip"
                if gpus
                else "unknown"
            )
            tests.append(
                {
                    "section": cat.get("category"),
                    "name": t.get("name"),
                    "result": overall,
                    "scope": None,
                    "gpus": gpus,
                    "messages": msgs,
                }
            )
    return {
        "version": (doc.get("metadata") or {}).get("DCGM Version") if isinstance(doc.get("metadata"), dict) else None,
        "tests": tests,
        "tables": 1,
        "cannot_run": None,
        "metadata": {},
    }


def parse_diag(text: str) -> dict:
    s = text.lstrip()
    if s.startswith("{"):
        try:
            doc = json.loads(s)
        except ValueError as e:
            raise DcgmParseError(f"`dcgmi diag -j` output is not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise DcgmParseError("`dcgmi diag -j` output is not a JSON object")
        return parse_diag_json(doc)
    return parse_diag_text(text)


def parse_health_json(text: str) -> dict:
    """`dcgmi health -c -j`: {"overall": "Healthy"|"Warning"|"Failure", "incidents": [...]} ."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise DcgmParseError(f"`dcgmi health -c -j` output is not valid JSON: {e}") from None
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("Overall Health"), dict):
        raise DcgmParseError("unrecognised `dcgmi health -c -j` document: expected body.'Overall Health'")
    overall = str(body["Overall Health"].get("value", ""))
    incidents = []
    for k, v in body.items():
        if k == "Overall Health" or not isinstance(v, dict):
            continue
        incidents.append({"entity": k, "detail": json.dumps(v, sort_keys=True)[:300]})
    return {"overall": overall, "incidents": incidents}


def verdict(parsed: dict) -> tuple[str, str, dict]:
    """(status, reason, evidence) for a parsed diag: fail on any failed test (its GPUs and first message),
    warn on a warned test, on a run that could not start (mixed MIG) or where every test was skipped."""
    tests = parsed["tests"]
    ev = {
        "dcgm_version": parsed.get("version"),
        "tests": [{k: t[k] for k in ("section", "name", "result", "scope")} | {"gpus": t["gpus"]} for t in tests][:40],
    }
    if parsed.get("cannot_run") and not [t for t in tests if t["result"] in ("pass", "fail", "warn")]:
        return "warn", f"DCGM could not run its diagnostic: {parsed['cannot_run'][:120]}", ev
    failed = [t for t in tests if t["result"] == "fail" or "fail" in t["gpus"].values()]
    if failed:
        t = failed[0]
        gpus = sorted(g for g, r in t["gpus"].items() if r == "fail")
        where = (
            f" on GPU {','.join(map(str, gpus))}"
            if gpus
            else " on every GPU"
            if (t["scope"] or "").lower() == "all"
            else f" ({t['scope']})"
            if t["scope"]
            else ""
        )
        msg = next((m["text"] for m in t["messages"] if m["kind"] in ("warning", "error")), "")
        ev["message"] = msg[:500]
        others = [x["name"] for x in failed[1:]]
        reason = f"dcgmi diag {t['name']} failed{where}" + (f" (also {', '.join(others[:3])})" if others else "")
        if msg:
            reason += f": {msg[:100]}"
        return "fail", reason, ev
    warned = [t for t in tests if t["result"] == "warn" or "warn" in t["gpus"].values()]
    if warned:
        return "warn", f"dcgmi diag {warned[0]['name']} warned", ev
    ran = [t for t in tests if t["result"] == "pass"]
    skipped = [t for t in tests if t["result"] == "skip"]
    unknown = [t for t in tests if t["result"] == "unknown"]
    if unknown and not ran:
        return "warn", f"dcgmi diag: unreadable result for {unknown[0]['name']}", ev
    if skipped and not [t for t in ran if (t["section"] or "").lower() != "deployment"]:
        return "warn", f"dcgmi diag ran no test beyond deployment ({len(skipped)} skipped)", ev
    if not ran:
        return "warn", "dcgmi diag reported no test result", ev
    return "ok", f"dcgmi diag: {len(ran)} tests passed" + (f", {len(skipped)} skipped" if skipped else ""), ev
