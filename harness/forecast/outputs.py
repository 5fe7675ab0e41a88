"""Forecast outputs: forecast.tsv (docs/spec.md#results-layout) and the figure (required and
selected capacity against EP size, per model)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from harness.forecast.core import COLUMNS
from harness.results.tables import write_table_atomic
from harness.vocab import DEFAULT_PAD_MULTIPLE

FORECAST_TSV = "forecast.tsv"
FORECAST_PNG = "forecast.png"


def write_outputs(out: Path, rows: list[dict], pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> None:
    """forecast.tsv and forecast.png in `out` (atomic writes)."""
    out.mkdir(parents=True, exist_ok=True)
    write_table_atomic(out / FORECAST_TSV, COLUMNS, rows)
    plot_forecast(rows, out / FORECAST_PNG, pad_multiple)


def _label(row: dict) -> str:
    mb = f" mb{row['micro_batch']}" if row.get("_micro_batch_given") else ""
    return f"{row['personality']} {row['placement']}{mb} {row['unit']}"


def plot_forecast(rows: list[dict], path: Path, pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> None:
    """Required (open) and selected (filled) capacity against EP size; one panel per model."""
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
        for label, rs in series.items():
            rs = sorted(rs, key=lambda r: r["ep"])
            xs = [r["ep"] for r in rs]
            c = colors[label]
            ax.plot(xs, [r["required_capacity"] for r in rs], "o--", mfc="white", mec=c,
                    color=c, lw=1, label=f"{label}: required")
            ax.plot(xs, [float(Decimal(r["selected_capacity"])) for r in rs], "D-", color=c,
                    lw=1.4, label=f"{label}: selected")
        eps = sorted({r["ep"] for r in pts})
        ax.set_xscale("log", base=2)
        ax.set_xticks(eps, [str(e) for e in eps])
        ax.set_xlabel("EP size")
        ax.set_title(f"{name}\nsteps = {pts[0]['steps']}, grid pad {pad_multiple}", fontsize=8)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("capacity = budget / (S'·K)")
    fig.suptitle("Forecast: required and selected capacity against EP size", fontsize=10)
    save_png(fig, path)


def routing_header(path: Path) -> dict:
    """The header line of an epcap trace (model, hidden, personality as recorded)."""
    import json

    with open(path, encoding="utf-8") as fh:
        return json.loads(fh.readline())
