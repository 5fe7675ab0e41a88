"""Section "Audit verdict": the docs/spec.md: audit rules verdict of this campaign
(harness.audit.audit_target)."""

from __future__ import annotations

from harness.audit import audit_target
from harness.audit.evidence import digest_command, evidence_digest, evidence_manifest
from harness.report.inputs import Context, md_table


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
    out += judged_lines(ctx)
    return out


def judged_lines(ctx: Context) -> list[str]:
    """The fingerprint of the evidence the verdict rests on, and the command (run in the
    results directory) that recomputes it: a reader tells a stale verdict without epcap."""
    try:
        digest, count = evidence_digest(ctx.results_dir), len(evidence_manifest(ctx.results_dir))
    except OSError as exc:
        return [ctx.missing("evidence digest", f"{type(exc).__name__}: {exc}"), ""]
    return [f"Judged: {digest} (sha256 of the `sha256sum` listing of the {count} evidence "
            "files the audit reads, docs/audit.md#evidence-files). Run in the results "
            "directory, this prints it; another hash means the evidence changed since this "
            "verdict: re-run `epcap audit`.", "", "```sh", *digest_command(), "```", ""]


def _field(obj, key: str):
    """obj[key] for a dict, obj.key otherwise (the audit result may use either)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
