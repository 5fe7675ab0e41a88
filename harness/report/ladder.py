"""fig7_ladder.png: the imbalance ladder's figure (docs/ladder.md), one line per library.

Two panels against the raw demand's max:mean at each step (ladder.tsv `raw_imbalance`):
the required capacity (the arm's clean time launches' peak / N) and the dispatch time
(median, p10-p90 bars), each point marked when its launches dropped slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.io.outdir import OutFile
from harness.results.rows import LadderRow


def plot_ladder(rows: Sequence[LadderRow], path: Path | OutFile) -> None:
    """Draw the ladder's two panels per model into one figure (a row of panels per model)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from harness.figures import save_png

    models = list(dict.fromkeys(r.model for r in rows)) or ["(no rows)"]
    fig = Figure(figsize=(11.0, 0.8 + 3.2 * len(models)), layout="constrained")
    axes = fig.subplots(len(models), 2, squeeze=False)
    for (cap_ax, time_ax), model in zip(axes, models, strict=True):
        mine = [r for r in rows if r.model == model]
        for i, backend in enumerate(dict.fromkeys(r.backend for r in mine)):
            color = f"C{i % 10}"
            line = sorted((r for r in mine if r.backend == backend and r.raw_imbalance),
                          key=lambda r: r.raw_imbalance)
            req = [(r.raw_imbalance, float(r.required_capacity)) for r in line
                   if r.required_capacity]
            if req:
                cap_ax.plot(*zip(*req, strict=True), marker="o", color=color, label=backend)
            timed = [r for r in line if r.dispatch_ms_median is not None]
            if timed:
                time_ax.errorbar(
                    [r.raw_imbalance for r in timed], [r.dispatch_ms_median for r in timed],
                    yerr=[[r.dispatch_ms_median - (r.dispatch_ms_p10 or r.dispatch_ms_median)
                           for r in timed],
                          [(r.dispatch_ms_p90 or r.dispatch_ms_median) - r.dispatch_ms_median
                           for r in timed]],
                    marker="o", capsize=3, color=color, label=backend)
                dropped = [r for r in timed if r.dropped_slots]
                if dropped:
                    time_ax.scatter([r.raw_imbalance for r in dropped],
                                    [r.dispatch_ms_median for r in dropped], marker="x",
                                    s=60, color="black", zorder=5)
        cap_ax.set_title(f"{model}: required capacity (clean time launches)", fontsize=9,
                         loc="left")
        time_ax.set_title(f"{model}: dispatch ms (median, p10-p90; x: slots dropped)",
                          fontsize=9, loc="left")
        for ax in (cap_ax, time_ax):
            ax.set_xlabel("raw demand max:mean (pre-balance peak / N)", fontsize=8)
            if ax.lines or ax.collections:
                ax.legend(fontsize=7)
    fig.suptitle("Imbalance ladder: each step a campaign at another routing_sigma, same seed",
                 fontsize=10)
    save_png(fig, path)
