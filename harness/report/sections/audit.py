"""Section "Audit verdict": the docs/spec.md: audit rules verdict of this campaign
(harness.audit.audit_target)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.audit import audit_target
from harness.errors import BadInput
from harness.io.safeio import TABLE_MAX_BYTES, read_bytes
from harness.report.inputs import Context, md_table
from harness.results.layout import ATTEMPTS_TSV, COMPARISON_TSV, SELECTION_TSV, TIMING_TSV

JUDGED = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, COMPARISON_TSV)   # what the audit reads


def render(ctx: Context) -> list[str]:
    """The docs/spec.md: audit rules verdict of this campaign (harness.audit.audit_target)."""
    out = ["## Audit verdict", ""]
    try:
        result = audit_target(ctx.results_dir)
    except Exception as exc:  # noqa: BLE001 - the report still stands without the audit
        return out + [ctx.missing("audit", f"audit_target failed ({type(exc).__name__}: {exc})"), ""]
    rows = []
    for up in getattr(result, "uploads", []) or []:
        reasons = _field(up, "reasons") or []
        ignored = _field(up, "ignored_cells") or []
        rows.append([str(_field(up, "path") or "."), str(_field(up, "verdict")),
                     ", ".join(map(str, reasons)) or "-", str(len(ignored))])
    summary = getattr(result, "summary", None) or {}
    if rows:
        out += [md_table(["upload", "verdict", "reasons", "ignored cells"], rows), ""]
    said = [f"- {w}" for up in getattr(result, "uploads", []) or []
            for w in [*(_field(up, "why") or []), *(f"note: {n}" for n in _field(up, "notes") or [])]]
    out += said + ([""] if said else [])
    out += ["Summary: " + (", ".join(f"{k} {v}" for k, v in summary.items()) or "none"), ""]
    out += [f"Judged: {judged_digest(ctx.results_dir)} (sha256 of {', '.join(JUDGED)} as the "
            "audit read them); if `sha256sum` of these files differs, re-run `epcap audit`: "
            "this verdict is stale.", ""]
    return out


def judged_digest(results_dir: Path) -> str:
    """sha256 over the judged TSVs' names and bytes ('absent' for a missing one), in JUDGED
    order: the fingerprint a reader compares to tell a stale embedded verdict."""
    digest = hashlib.sha256()
    for name in JUDGED:
        path = results_dir / name
        try:
            data = read_bytes(path, max_bytes=TABLE_MAX_BYTES)
        except BadInput:
            data = b"absent"            # missing, not a regular file, or over the cap
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def _field(obj, key: str):
    """obj[key] for a dict, obj.key otherwise (the audit result may use either)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
