"""demand.tsv (every dispatch row of the measure and validate cells) and the figures; a
figure that fails to draw is a stated missing part, never a lost report."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.errors import BadInput
from harness.io.atomic import open_atomic
from harness.io.safeio import read_json
from harness.report.inputs import (
    DEMAND_COLUMNS,
    DEMAND_PURPOSES,
    Context,
    cell_logs,
    num,
)
from harness.results.layout import CELL_JSON, Cell, parse_cell_name
from harness.results.tables import Table
from harness.telemetry.lines import FIELDS
from harness.telemetry.summary import rows_array
from harness.vocab import TIMED_OK, Purpose, Status


def build_outputs(ctx: Context) -> None:
    """Write demand.tsv and draw figures 1 to 4 before any section renders; set
    ctx.demand_note and ctx.demand_figures for the demand section."""
    note, measured = build_demand(ctx)
    ctx.demand_figures = draw_figures(ctx, measured)
    if not measured and not any(u.startswith("demand") for u in ctx.unavailable):
        note += "\n\n" + ctx.missing("demand heatmaps", "no measure cell has telemetry rows")
    ctx.demand_note = note


def demand_cells(results_dir: Path) -> list[Cell]:
    """Measure and validate cells present under cells/, ordered by model, backend, name."""
    root = results_dir / "cells"
    cells = [parse_cell_name(p.name) for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    picked = [c for c in cells if c and c.purpose in DEMAND_PURPOSES]
    return sorted(picked, key=lambda c: (c.model, c.backend, c.purpose, c.attempt, c.name))


def build_demand(ctx: Context):
    """Write demand.tsv; return (note line, {cell name: demand_map_rows of its rows} of the
    measure cells with telemetry rows)."""
    path = ctx.dest / "demand.tsv"
    cells = demand_cells(ctx.results_dir)
    measured = {}
    with open_atomic(path, "w") as fh:
        fh.write("\t".join(DEMAND_COLUMNS) + "\n")
        for c in cells:
            logs = cell_logs(ctx.results_dir / "cells" / c.name)
            rows = rows_array(logs) if logs else None
            if rows is None or len(rows) == 0:
                continue
            fh.writelines(f"{c.name}\t{it}\t{layer}\t{rank}\t{actual}\t{budget}\t{expected}\n"
                          for it, layer, rank, actual, budget, expected
                          in rows[:, TSV_ORDER].tolist())
            if c.purpose == Purpose.MEASURE:
                measured[c.name] = demand_map_rows(rows)
    note = (f"[`demand.tsv`](demand.tsv): one row per dispatch telemetry row of the "
            f"{len(cells)} measure and validate cells (columns: {', '.join(DEMAND_COLUMNS)}). "
            "Heatmaps: measure cells only; value = max over all iterations (no warmup skipped) "
            "of actual_valid_recv / expected_recv per (rank, layer).")
    if not cells:
        note = ctx.missing("demand", "no measure or validate cell directories under cells/")
    return note, measured


# demand.tsv's columns after `run`, as indices into a row of rows_array (FIELDS order)
TSV_ORDER = [FIELDS.index("iter" if col == "iteration" else col) for col in DEMAND_COLUMNS[1:]]


def demand_map_rows(rows: np.ndarray) -> DemandRows | None:
    """What a heatmap keeps of a measure cell's rows (rows_array, FIELDS columns): per (rank,
    layer) the max ratio actual_valid_recv / expected_recv and whether any row saturated
    (actual >= budget), and the cell's max budget / expected_recv; None when no row has a
    non-zero uniform share. Reduced as each cell is read, so the report holds one cell's
    rows at a time, not the campaign's."""
    col = {name: rows[:, i] for i, name in enumerate(FIELDS)}
    keep = col["expected_recv"] > 0          # a zero uniform share has no ratio
    if not keep.any():
        return None
    rank, layer = col["rank"][keep], col["layer"][keep]
    actual, budget, expected = (col[k][keep] for k in ("actual_valid_recv", "budget",
                                                       "expected_recv"))
    ranks, r_at = np.unique(rank, return_inverse=True)
    layers, l_at = np.unique(layer, return_inverse=True)
    ratio = np.full((len(ranks), len(layers)), np.nan)
    np.fmax.at(ratio, (r_at, l_at), actual / expected)
    sat = np.zeros(ratio.shape, dtype=bool)
    np.logical_or.at(sat, (r_at, l_at), actual >= budget)
    return DemandRows([int(r) for r in ranks], [int(v) for v in layers], ratio, sat,
                      float((budget / expected).max()))


@dataclass(frozen=True)
class DemandRows:
    """One measure cell's heatmap: ranks x layers max ratio (NaN where the cell has no row)
    and saturation, and its max budget / expected_recv."""

    ranks: list[int]
    layers: list[int]
    ratio: np.ndarray
    saturated: np.ndarray
    budget_ratio: float


def demand_maps(measured: dict) -> dict[str, list]:
    """model -> DemandMap list built from the measure cells' reduced rows (demand_map_rows)."""
    from harness.figures import DemandMap  # lazy: matplotlib is slow to import

    out: dict[str, list] = {}
    for name, reduced in measured.items():
        cell = parse_cell_name(name)
        if reduced is None:
            continue
        out.setdefault(cell.model, []).append(DemandMap(
            name, cell.backend, reduced.ranks, reduced.layers, reduced.ratio,
            reduced.saturated, reduced.budget_ratio))
    return out


# --------------------------------------------------------------------------- figures


def _safe(name: str) -> str:
    """A model name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _draw(ctx: Context, name: str, plot, *args) -> bool:
    """Draw one figure; a plotting error becomes a stated missing part, not a lost report."""
    try:
        plot(*args)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - the tables still stand without this figure
        ctx.missing(f"figure {name}", f"drawing failed ({type(exc).__name__}: {exc})")
        return False
    ctx.figures.append(name)
    return True


def draw_figures(ctx: Context, measured: dict) -> list[tuple[str, str]]:
    """Draw every figure the inputs allow; return the demand figures as (model, file)."""
    from harness import figures as fg  # lazy: matplotlib is slow to import

    ctx.dest.remove_matching("fig[1-4]_*.png")
    colors = fg.backend_colors([b for _, b in ctx.pairs])
    if ctx.selection is not None and ctx.selection.rows:
        points = _cap_points(ctx.selection)
        _draw(ctx, "fig1_capacity.png", fg.plot_capacity, points,
              ctx.dest / "fig1_capacity.png", ctx.pad[0], colors)
        _draw(ctx, "fig2_overprovision.png", fg.plot_overprovision, points,
              ctx.dest / "fig2_overprovision.png", ctx.pad[0], colors)
    tpoints = _timing_points(ctx)
    if tpoints:
        missing_p10 = ctx.timing is None or not ctx.timing.has("dispatch_ms_p10")
        _draw(ctx, "fig4_timing.png", fg.plot_timing, tpoints, ctx.dest / "fig4_timing.png",
              missing_p10, colors)
    demand = []
    order = list(dict.fromkeys(m for m, _ in ctx.pairs))
    rank = {m: i for i, m in enumerate(order)}
    for model, maps in sorted(demand_maps(measured).items(),
                              key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])):
        name = f"fig3_demand_{_safe(model)}.png"
        if _draw(ctx, name, fg.plot_demand, model, maps, ctx.dest / name):
            demand.append((model, name))
    return demand


def _cap_points(t: Table):
    """CapPoint records from the selection table."""
    from harness.figures import CapPoint  # lazy: matplotlib is slow to import

    pts = []
    for i, r in enumerate(t.rows):
        n = num(t, i, "uniform_tokens")
        pts.append(CapPoint(r["model"], r["backend"], int(n) if n else None,
                            num(t, i, "required_capacity"), num(t, i, "selected_capacity"),
                            num(t, i, "over_provision"), r["required_capacity"],
                            r["selected_capacity"]))
    return pts


def _timing_points(ctx: Context):
    """TimePoint records for figure 4, plus placeholders for pairs that did not fit untimed."""
    from harness.figures import TimePoint  # lazy: matplotlib is slow to import

    t = ctx.timing
    points, seen = [], set()
    for i, r in enumerate(t.rows if t else []):
        seen.add((r["model"], r["backend"]))
        trio = [tuple(num(t, i, f"{m}_ms_{q}") for q in ("p10", "median", "p90"))
                for m in ("dispatch", "combine")]
        points.append(TimePoint(r["model"], r["backend"], r["status"], trio[0], trio[1],
                                num(t, i, "noise_floor_pct"), r["timing_capacity"],
                                _launch_medians(ctx, r["model"], r["backend"]),
                                _int(num(t, i, "dropped_slots"))))
    for pair in ctx.dnf:
        if pair not in seen:
            points.append(TimePoint(pair[0], pair[1], Status.DOES_NOT_FIT, (None,) * 3, (None,) * 3,
                                    None))
    return points


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _launch_medians(ctx: Context, model: str, backend: str) -> tuple:
    """(dispatch, combine) median of each usable time launch of a pair, from its cell.json."""
    out = []
    for r in ctx.attempts.rows if ctx.attempts else []:
        if (r["model"], r["backend"], r["purpose"]) != (model, backend, Purpose.TIME) \
                or r["status"] not in TIMED_OK:
            continue
        try:
            doc = read_json(ctx.results_dir / r["cell_dir"] / CELL_JSON)
        except BadInput:
            continue
        if not isinstance(doc, dict):
            continue
        timing = doc.get("timing") or {}
        out.append((timing.get("dispatch_ms_median"), timing.get("combine_ms_median")))
    return tuple(out)
