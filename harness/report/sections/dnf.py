"""Section "Does not fit": every (model, backend) pair that ran out of memory, and where."""

from __future__ import annotations

from harness.report.inputs import Context, md_table


def render(ctx: Context) -> list[str]:
    """Every (model, backend) pair that did not fit, a row per place where it happened."""
    out = ["## Does not fit", ""]
    if not ctx.dnf:
        return out + ["No (model, backend) pair ran out of memory.", ""]
    rows = [[m, b, w] for (m, b), places in ctx.dnf.items() for w in places]
    return out + [md_table(["model", "backend", "where"], rows), "",
                  "does_not_fit is data (out of memory for that pair), not an error.", ""]
