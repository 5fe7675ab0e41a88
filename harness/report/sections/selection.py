"""Section "Capacity selection": the selection table (TSV strings verbatim), each selected
capacity re-checked against the recorded grid, and figures 1 and 2."""

from __future__ import annotations

from harness.grid.capacity import is_executable
from harness.report.inputs import NEED_SELECTION, SELECTION, Context, md_table


def render(ctx: Context) -> list[str]:
    """The selection table (TSV strings verbatim) and figures 1 and 2."""
    out = ["## Capacity selection", ""]
    if ctx.selection is None:
        return out + [ctx.missing("selection", f"{SELECTION} not found (select stage not run)"), ""]
    on_grid = _grid_checker(ctx)
    cols = [c for c in NEED_SELECTION]
    rows = [[r[c] for c in cols] + [on_grid(r)] for r in ctx.selection.rows]
    out += [md_table(cols + ["executable (checked)"], rows), "",
            "Capacity = budget / (S·K) where S·K = `uniform_tokens` (N); budgets in (token, "
            "expert) slots. `over_provision` = selected budget / measured peak. "
            "`executable (checked)` re-checks `int(selected_capacity × N) % "
            f"{ctx.pad[0]} == 0` with harness.grid.capacity (pad multiple {ctx.pad[0]}: "
            f"{ctx.pad[1]}).", ""]
    for name, alt in (("fig1_capacity.png", "Required vs selected capacity"),
                      ("fig2_overprovision.png", "Over-provisioning")):
        if name in ctx.figures:
            out += [f"![{alt}]({name})", ""]
    return out


def _grid_checker(ctx: Context):
    """A row -> 'yes'/'NO'/'' function: is the selected capacity on the recorded grid."""
    def check(r: dict[str, str]) -> str:
        if not r["selected_capacity"] or not r["uniform_tokens"]:
            return ""
        ok = is_executable(r["selected_capacity"], int(float(r["uniform_tokens"])), ctx.pad[0])
        return "yes" if ok else "NO"

    return check
