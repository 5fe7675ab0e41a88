"""Forecast outputs: forecast.tsv (docs/spec.md#results-layout) and the figure (required and
selected capacity against EP size, per model)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from harness.forecast.core import COLUMNS
from harness.io.boundary.logs import open_log
from harness.io.bounds import json_loads
from harness.io.outdir import OutDir, OutFile
from harness.results.tables import write_table_atomic
from harness.vocab import DEFAULT_PAD_MULTIPLE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORECAST_TSV = "forecast.tsv"
FORECAST_PNG = "forecast.png"


def write_outputs(out: Path | OutDir, rows: list[dict],
                  pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> None:
    """forecast.tsv and forecast.png in `out` (atomic writes through the folder's fd; a path
    is opened here as the output folder, a link there refused)."""
    if isinstance(out, OutDir):
        write_table_atomic(out / FORECAST_TSV, COLUMNS, rows)
        plot_forecast(rows, out / FORECAST_PNG, pad_multiple)
        return
    with OutDir.open(out, "--out") as folder:
        write_outputs(folder, rows, pad_multiple)


def _label(row: dict) -> str:
    mb = f" mb{row['micro_batch']}" if row.get("_micro_batch_given") else ""
    return f"{row['personality']} {row['placement']}{mb} {row['unit']}"


# one style per series of a panel, so that no series is drawn exactly over another: the
# selected line's marker and line style, and a sideways offset (in octaves of EP size)
SELECTED_MARKERS = ("D", "s", "^", "v", "P", "X", "p", "h")
SELECTED_STYLES = ("-", "-.", ":", (0, (6, 2)), (0, (3, 1, 1, 1, 1, 1)))
DODGE_OCTAVES = 0.08


def plot_forecast(rows: list[dict], path: Path | OutFile,
                  pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> Figure:
    """Required (open) and selected (filled) capacity against EP size; one panel per model.
    Series side by side (offset sideways, each its own marker and line style) and the open
    required markers above the filled ones: equal values never hide a series."""
    from matplotlib.figure import Figure

    from harness.figures import backend_colors, save_png

    panels: dict[str, list[dict]] = {}
    for r in rows:
        panels.setdefault(r["model"] or Path(r["source"]).name, []).append(r)
    fig = Figure(figsize=(max(6.0, 4.2 * len(panels)), 4.4), layout="constrained")
    axes = fig.subplots(1, max(1, len(panels)), squeeze=False)[0]
    colors = backend_colors([_label(r) for r in rows])
    for ax, (name, pts) in zip(axes, panels.items(), strict=False):
        series: dict[str, list[dict]] = {}
        for r in pts:
            series.setdefault(_label(r), []).append(r)
        for i, (label, rs) in enumerate(series.items()):
            rs = sorted(rs, key=lambda r: r["ep"])
            shift = 2 ** (DODGE_OCTAVES * (i - (len(series) - 1) / 2))
            xs = [r["ep"] * shift for r in rs]
            c = colors[label]
            ax.plot(xs, [float(Decimal(r["selected_capacity"])) for r in rs],
                    marker=SELECTED_MARKERS[i % len(SELECTED_MARKERS)],
                    ls=SELECTED_STYLES[i % len(SELECTED_STYLES)], color=c, lw=1.4, ms=6,
                    zorder=2 + i / 100, label=f"{label}: selected")
            ax.plot(xs, [r["required_capacity"] for r in rs], "o--", mfc="none", mec=c,
                    mew=1.3, ms=8, color=c, lw=1, zorder=3 + i / 100, label=f"{label}: required")
        eps = sorted({r["ep"] for r in pts})
        ax.set_xscale("log", base=2)
        ax.set_xticks(eps, [str(e) for e in eps])
        ax.minorticks_off()
        ax.set_xlabel("EP size" + (" (series side by side)" if len(series) > 1 else ""))
        ax.set_title(f"{name}\nsteps = {pts[0]['steps']}, grid pad {pad_multiple}", fontsize=8)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("capacity = budget / (S'·K)")
    fig.suptitle("Forecast: required and selected capacity against EP size", fontsize=10)
    save_png(fig, path)
    return fig


HEADER_MAX_BYTES = 1 << 20        # a trace header line: a few hundred bytes in practice


def routing_header(path: Path) -> dict:
    """The header line of an epcap trace (model, hidden, personality as recorded)."""
    with open_log(path, field="trace") as fh:     # a regular file; one bounded line
        return json_loads(fh.readline(HEADER_MAX_BYTES).decode("utf-8"))
