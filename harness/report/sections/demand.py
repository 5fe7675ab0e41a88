"""Section "Per-rank peak demand": the demand.tsv pointer and the per-rank heatmaps
(written beforehand by harness.report.demand into ctx.demand_note and ctx.demand_figures)."""

from __future__ import annotations

from harness.report.inputs import Context


def render(ctx: Context) -> list[str]:
    """Per-rank peak demand heatmaps and the demand.tsv pointer."""
    out = ["## Per-rank peak demand", "", ctx.demand_note, ""]
    for model, name in ctx.demand_figures:
        out += [f"![{model}: per-rank peak demand]({name})", ""]
    return out
