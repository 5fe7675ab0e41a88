"""Section "Failures by class": attempt counts by status, failure classes first, with the
cells of each failure and the log line that classified it."""

from __future__ import annotations

from harness.report.inputs import ATTEMPTS, Context, md_table
from harness.vocab import FAILURE_CLASSES


def render(ctx: Context) -> list[str]:
    """Attempt counts by status, failure classes first; then each failed cell and its line."""
    out = ["## Failures by class", ""]
    a = ctx.attempts
    if a is None:
        return out + [ctx.missing("failures", f"{ATTEMPTS} not found"), ""]
    by: dict[str, list[dict[str, str]]] = {}
    for r in a.rows:
        by.setdefault(r["status"], []).append(r)
    rows = []
    for status in list(FAILURE_CLASSES) + sorted(set(by) - set(FAILURE_CLASSES)):
        kind = "failure" if status in FAILURE_CLASSES else "outcome"
        rows.append([status, kind, str(len(by.get(status, [])))])
    out += [md_table(["status", "kind", "attempts"], rows), ""]
    failed = [[r["cell_dir"], r["status"], r.get("failure_line") or ""] for r in a.rows
              if r["status"] in FAILURE_CLASSES]
    if failed:
        out += ["Each failed attempt, with the log line that classified it:", "",
                md_table(["cell", "status", "matching log line"], failed), ""]
    return out + [f"From the `status` column of {ATTEMPTS} ({len(a.rows)} attempts).", ""]
