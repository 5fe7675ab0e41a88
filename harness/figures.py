"""Report figures (matplotlib, Agg, no pyplot state): capacity, over-provisioning, demand, timing.

Each `plot_*` function takes plain records built by harness.report and writes one PNG
atomically (temp file + os.replace). matplotlib is imported here only, and this module is
imported lazily by the report, so commands that draw nothing never pay for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from harness.io.atomic import open_atomic  # noqa: E402
from harness.io.outdir import OutFile  # noqa: E402
from harness.vocab import DEFAULT_PAD_MULTIPLE, Status  # noqa: E402

DPI = 110
GRID_MAX_LINES = 60     # denser grids are drawn only next to each point
PLACEHOLDER_HATCH = "///"
ANNOTATE_MAX_CELLS = 160   # heatmaps this small get their values written in the cells


@dataclass(frozen=True)
class CapPoint:
    """One capacity_selection.tsv row as numbers (None = empty cell)."""

    model: str
    backend: str
    uniform_tokens: int | None
    required: float | None
    selected: float | None
    over_provision: float | None
    required_text: str
    selected_text: str


@dataclass(frozen=True)
class TimePoint:
    """One timing.tsv row as numbers (None = empty cell or column absent)."""

    model: str
    backend: str
    status: str
    dispatch: tuple[float | None, float | None, float | None]   # p10, median, p90 (ms)
    combine: tuple[float | None, float | None, float | None]
    noise_floor_pct: float | None
    capacity: str = ""           # timing_capacity as written in the TSV
    launches: tuple[tuple[float | None, float | None], ...] = ()   # per launch (disp, comb)
    dropped_slots: int | None = None    # timing.tsv dropped_slots (slots the buffers dropped)


@dataclass(frozen=True)
class DemandMap:
    """Per-rank peak demand of one measurement run: ranks x layers."""

    run: str
    backend: str
    ranks: list[int]
    layers: list[int]
    ratio: np.ndarray          # max over iterations of actual_valid_recv / expected_recv
    saturated: np.ndarray      # bool: some row at this (rank, layer) had actual >= budget
    budget_ratio: float        # budget / expected_recv of the run


def backend_colors(backends: list[str]) -> dict[str, str]:
    """A stable colour per backend name (sorted, case-insensitive), shared by all figures."""
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
    names = sorted({b for b in backends}, key=str.lower)
    return {b: palette[i % len(palette)] for i, b in enumerate(names)}


def save_png(fig: Figure, path: Path | OutFile) -> None:
    """Write the figure as PNG atomically (harness.io.atomic.open_atomic; an OutFile through
    its folder's open fd)."""
    with open_atomic(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=DPI)


def _by_model(items: list) -> dict[str, list]:
    """Group records by model, keeping first-seen order."""
    out: dict[str, list] = {}
    for it in items:
        out.setdefault(it.model, []).append(it)
    return out


def _grid_lines(ax, n: int, pad: int, lo: float, hi: float, xs: list[float],
                ys: list[float]) -> str:
    """Draw executable capacities k*pad/n in [lo, hi]; local ticks when the grid is too dense."""
    step = pad / n
    k0, k1 = math.floor(lo / step), math.ceil(hi / step)
    if k1 - k0 <= GRID_MAX_LINES:
        for k in range(k0, k1 + 1):
            ax.axhline(k * step, color="0.82", lw=0.7, zorder=0)
        return f"grid step {pad}/N = {step:.6g}"
    for x, y in zip(xs, ys, strict=True):
        kc = round(y / step)
        for k in range(kc - 3, kc + 4):
            ax.hlines(k * step, x - 0.3, x + 0.3, color="0.65", lw=0.7, zorder=0)
    return f"grid step {pad}/N = {step:.6g}\n(dense: only rungs next to each point)"


def _model_panels(points: list, colors: dict[str, str] | None, width: float, height: float):
    """One panel per model (first-seen order), the figure and the backend colours."""
    groups = _by_model(points)
    colors = colors or backend_colors([p.backend for p in points])
    fig = Figure(figsize=(max(7.5, width * len(groups)), height), layout="constrained")
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    return fig, list(zip(axes, groups.items(), strict=True)), colors


def plot_capacity(points: list[CapPoint], path: Path | OutFile, pad: int = DEFAULT_PAD_MULTIPLE,
                  colors: dict[str, str] | None = None) -> Figure:
    """Figure 1: required vs selected capacity per model and backend on the executable grid."""
    fig, panels, colors = _model_panels(points, colors, 3.6, 4.6)
    for ax, (model, pts) in panels:
        xs = list(range(len(pts)))
        vals = [v for p in pts for v in (p.required, p.selected) if v is not None]
        lo, hi = (min(vals), max(vals)) if vals else (1.0, 2.0)
        n = pts[0].uniform_tokens
        if n and vals:      # show the rung below the lowest requirement: minimality is visible
            step = pad / n
            lo = min(lo, math.floor(lo / step - 1e-9) * step) if hi - lo < 40 * step else lo
        margin = max(0.01, 0.06 * (hi - lo))
        lo, hi = lo - margin, hi + margin
        note = "N unknown: grid not drawn"
        if n:
            marks = [(x, p.selected if p.selected is not None else p.required)
                     for x, p in zip(xs, pts, strict=True)]
            marks = [(x, y) for x, y in marks if y is not None]
            note = _grid_lines(ax, n, pad, lo, hi, [x for x, _ in marks], [y for _, y in marks])
        for x, p in zip(xs, pts, strict=True):
            c = colors[p.backend]
            if p.required is not None:
                ax.plot([x], [p.required], "o", mfc="white", mec=c, mew=1.6, ms=8, zorder=3)
                ax.annotate(p.required_text, (x, p.required), xytext=(8, -10),
                            textcoords="offset points", fontsize=7, color="0.25")
            if p.selected is not None:
                ax.plot([x], [p.selected], "D", color=c, ms=7, zorder=3)
                ax.annotate(p.selected_text, (x, p.selected), xytext=(8, 3),
                            textcoords="offset points", fontsize=7, color=c)
            if p.required is not None and p.selected is not None:
                ax.plot([x, x], [p.required, p.selected], color=c, lw=1.2, zorder=2)
            if p.selected is None:
                ax.text(x, (lo + hi) / 2, "not selected", rotation=90, ha="center",
                        va="center", fontsize=8, color="0.3")
        ax.set_ylim(lo, hi)
        ax.set_xlim(-0.6, len(pts) - 0.4)
        ax.set_xticks(xs, [p.backend for p in pts])
        ax.set_title(f"{model}\nN = S·K = {n if n else '?'}; {note}", fontsize=8)
    panels[0][0].set_ylabel("capacity = budget / (S·K)")
    handles = [
        Line2D([], [], ls="", marker="o", mfc="white", mec="0.2", ms=8,
               label="required (peak actual_valid_recv / N)"),
        Line2D([], [], ls="", marker="D", color="0.2", ms=7, label="selected (executable)"),
        Line2D([], [], color="0.75", lw=1, label=f"executable grid: budget = k·{pad} slots"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle("Required vs selected capacity", fontsize=11)
    save_png(fig, path)
    return fig


def grid_step_pct(p: CapPoint, pad: int) -> float | None:
    """The most the executable grid's rounding can add above this row's measured peak, as %:
    one pad multiple of the peak's tokens (required capacity x uniform tokens)."""
    if not p.required or not p.uniform_tokens:
        return None
    return 100.0 * pad / (p.required * p.uniform_tokens)


def plot_overprovision(points: list[CapPoint], path: Path | OutFile, pad: int = DEFAULT_PAD_MULTIPLE,
                       colors: dict[str, str] | None = None) -> Figure:
    """Figure 2: selected budget / measured peak, as % above the peak, per model and backend.
    The y-axis reaches at least one grid step above each peak (a dashed mark per bar): the
    rounding the grid forces is the scale a bar is read against, so 1-3% does not fill the
    plot."""
    groups = _by_model(points)
    backends = list(dict.fromkeys(p.backend for p in points))
    colors = colors or backend_colors(backends)
    width = 0.8 / max(1, len(backends))
    fig = Figure(figsize=(max(7.0, 1.9 * len(groups) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    top = bottom = 0.0
    marked = False
    for gi, (_model, pts) in enumerate(groups.items()):
        for p in pts:
            x = gi - 0.4 + width * (backends.index(p.backend) + 0.5)
            step = grid_step_pct(p, pad)
            if step is not None:
                top = max(top, step)
                ax.hlines(step, x - width * 0.45, x + width * 0.45, colors="0.3",
                          linestyles="dashed", lw=0.9)
                marked = True
            if p.over_provision is None:
                ax.text(x, 0, "no selection", rotation=90, ha="center", va="bottom", fontsize=7)
                continue
            pct = (p.over_provision - 1.0) * 100.0
            top, bottom = max(top, pct), min(bottom, pct)     # below 0: budget < peak (a bug)
            ax.bar(x, pct, width * 0.9, color=colors[p.backend])
            ax.annotate(f"{pct:+.2f}%", (x, pct), xytext=(0, 2 if pct >= 0 else -10),
                        textcoords="offset points", ha="center", fontsize=7)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_ylim(bottom * 1.25, max(1.0, top * 1.2))
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel("over-provisioning: % above measured peak\n(selected budget / peak − 1)")
    handles = [Patch(color=colors[b], label=b) for b in backends]
    if marked:
        handles += [Line2D([], [], color="0.3", ls="dashed", lw=0.9,
                           label=f"one grid step\n({pad} tokens)")]
    ax.legend(handles=handles, fontsize=8, title="backend", title_fontsize=8)
    ax.set_title("Over-provisioning of the selected capacity\n(value labels rounded to 0.01%)",
                 fontsize=10)
    save_png(fig, path)
    return fig


DEMAND_HOT = 1.25      # peak demand / uniform share at the hot end of the colour scale (at least)


def demand_scale(maps: list[DemandMap]) -> tuple[float, float]:
    """The heatmap's colour range: anchored at the uniform share (1.0) and reaching at least
    DEMAND_HOT, so a 1-3% excess stays near the cool end instead of spanning the whole
    scale; a run hotter than that widens it to its own maximum."""
    lo = min(float(np.nanmin(m.ratio)) for m in maps)
    hi = max(float(np.nanmax(m.ratio)) for m in maps)
    return min(lo, 1.0), max(hi, DEMAND_HOT)


def plot_demand(model: str, maps: list[DemandMap], path: Path | OutFile) -> Figure:
    """Figure 3: one heatmap (ranks x layers) per measurement run of a model, shared colour scale."""
    vmin, vmax = demand_scale(maps)
    ncols = max(len(m.layers) for m in maps)
    width = min(18.0, max(8.5, 0.16 * ncols + 4))
    height = min(24.0, 1.6 + sum(0.8 + 0.25 * len(m.ranks) for m in maps))
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(len(maps), 1, squeeze=False,
                        height_ratios=[len(m.ranks) + 2 for m in maps])[:, 0]
    image = None
    for ax, m in zip(axes, maps, strict=True):
        image = ax.imshow(m.ratio, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax,
                          interpolation="nearest")
        small = m.ratio.size <= ANNOTATE_MAX_CELLS
        if small:
            _annotate_cells(ax, m.ratio, (vmin + vmax) / 2)
        rr, cc = np.nonzero(m.saturated)
        if len(rr):         # beside the value on small maps, centred on large ones
            shift = (0.32, -0.22) if small else (0.0, 0.0)
            ax.plot(cc + shift[0], rr + shift[1], "x", color="#ff3030", ms=7, mew=2)
        rstep = max(1, len(m.ranks) // 16)
        ax.set_yticks(range(0, len(m.ranks), rstep), [str(r) for r in m.ranks[::rstep]],
                      fontsize=7)
        step = max(1, len(m.layers) // 24)
        ax.set_xticks(range(0, len(m.layers), step), [str(v) for v in m.layers[::step]],
                      fontsize=7)
        ax.set_ylabel("rank", fontsize=8)
        sat = int(m.saturated.sum())
        shown = "; values to 2 decimals" if m.ratio.size <= ANNOTATE_MAX_CELLS else ""
        ax.set_title(f"{m.run}\nbudget = {m.budget_ratio:.4g} × expected_recv; "
                     f"saturated (rank, layer) cells: {sat}{shown}", fontsize=8, loc="left")
    axes[-1].set_xlabel("layer", fontsize=8)
    cbar = fig.colorbar(image, ax=list(axes), aspect=30)
    cbar.set_label("peak demand / uniform share\n= max over iterations of\n"
                   f"actual_valid_recv / expected_recv\n(scale from 1.0 to at least {DEMAND_HOT})",
                   fontsize=8)
    handles = [Line2D([], [], ls="", marker="x", color="#ff3030", mew=2,
                      label="saturated: some iteration had actual_valid_recv ≥ budget "
                            "(tokens dropped; the run's requirement is only a lower bound)")]
    fig.legend(handles=handles, loc="outside lower left", fontsize=7)
    fig.suptitle(f"{model}: per-rank peak dispatch demand across layers (measurement runs)",
                 fontsize=10)
    save_png(fig, path)
    return fig


def _annotate_cells(ax, ratio: np.ndarray, mid: float) -> None:
    """Write each cell's value (2 decimals) on small heatmaps, dark on light colours."""
    for (r, c), v in np.ndenumerate(ratio):
        if v == v:
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="black" if v > mid else "white")


def _whisker(ax, x: float, trio, color: str, marker: str) -> None:
    """Median marker with a p10-p90 whisker; a missing p10 draws median..p90 only."""
    p10, med, p90 = trio
    if med is None:
        return
    lo = p10 if p10 is not None else med
    hi = p90 if p90 is not None else med
    ax.errorbar([x], [med], yerr=[[med - lo], [hi - med]], fmt=marker, color=color, ms=6,
                capsize=4, lw=1.3, zorder=3)


def _launch_band(ax, x: float, medians: list[float | None], color: str) -> None:
    """Shade the launches' range: min to max of the launch medians (two or more launches)."""
    ys = [m for m in medians if m is not None]
    if len(ys) < 2:
        return
    ax.add_patch(Rectangle((x - 0.12, min(ys)), 0.24, max(ys) - min(ys), color=color,
                           alpha=0.18, lw=0, zorder=1))


def _launch_dots(ax, x: float, medians: list[float | None], color: str) -> None:
    """Each launch's median as a small hollow dot beside the whisker (run-to-run spread)."""
    ys = [m for m in medians if m is not None]
    if len(ys) < 2:
        return
    xs = [x + 0.09 + 0.035 * (i - (len(ys) - 1) / 2) for i in range(len(ys))]
    ax.scatter(xs, ys, s=12, facecolors="none", edgecolors=color, linewidths=0.9, zorder=4)


def placeholder_label(status: str, dropped_slots: int | None = None) -> str:
    """The label of a pair figure 4 draws no time for: 'does not fit', or 'not timed: drops,
    12 slots dropped' (the timing.tsv status and dropped slots, as the tables state them)."""
    if status == Status.DOES_NOT_FIT:
        return "does not fit"
    label = f"not timed: {status or 'no row'}"
    return label + (f", {dropped_slots} slots dropped" if dropped_slots else "")


def _placeholder(ax, x: float, status: str, dropped_slots: int | None = None) -> None:
    """A hatched, labelled full-height box for a pair that has no timing."""
    label = placeholder_label(status, dropped_slots)
    ax.add_patch(Rectangle((x - 0.38, 0.0), 0.76, 1.0, transform=ax.get_xaxis_transform(),
                           fill=False, hatch=PLACEHOLDER_HATCH, ec="0.45", lw=0.8, zorder=1))
    ax.text(x, 0.5, label, transform=ax.get_xaxis_transform(), rotation=90, ha="center",
            va="center", fontsize=9, color="0.15",
            bbox={"facecolor": "white", "edgecolor": "0.45", "pad": 2})


TICK_FONT = 8.0              # points: the backend names under the timing panels
PANEL_MAX_IN = 6.0           # widest panel (inches) before the names turn vertical
PLOT_SHARE = 0.7             # of a panel's width left to the plot (y ticks, padding aside)


def _text_width_pt(text: str, size: float) -> float:
    """The drawn width of a string in points (matplotlib's text-to-path metrics)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    width, _, _ = TextToPath().get_text_width_height_descent(text, FontProperties(size=size),
                                                              ismath=False)
    return width


def name_layout(names_per_panel: list[list[str]], size: float = TICK_FONT,
                min_width: float = 3.4) -> tuple[float, int, float]:
    """(panel width in inches, label rotation, extra height in inches) for backend names
    that must not overlap: horizontal when each name fits its slot in a panel of at most
    PANEL_MAX_IN, else vertical (a vertical name is one line high, the slot never too
    narrow), the figure taller by the longest name."""
    n = max((len(ns) for ns in names_per_panel), default=1) or 1
    widest = max((_text_width_pt(t, size) for ns in names_per_panel for t in ns), default=0.0)
    flat = n * (widest + 2 * size) / 72 / PLOT_SHARE
    if flat <= PANEL_MAX_IN:
        return max(min_width, flat), 0, 0.0
    return max(min_width, n * 3 * size / 72 / PLOT_SHARE), 90, widest / 72


def plot_timing(points: list[TimePoint], path: Path | OutFile, missing_p10: bool,
                colors: dict[str, str] | None = None) -> Figure:
    """Figure 4: dispatch and combine arm medians with p10-p90, the launch medians and
    their range, per model."""
    width, rotation, taller = name_layout([[p.backend for p in ps]
                                           for ps in _by_model(points).values()])
    fig, panels, colors = _model_panels(points, colors, width, 4.8 + taller)
    for ax, (model, pts) in panels:
        highs = [v for p in pts if p.status == Status.OK for v in (*p.dispatch, *p.combine)
                 if v is not None]
        for x, p in enumerate(pts):
            if p.status != Status.OK or p.dispatch[1] is None:
                _placeholder(ax, x, p.status, p.dropped_slots)
                continue
            c = colors[p.backend]
            for k, (off, trio, mk) in enumerate(((-0.2, p.dispatch, "o"),
                                                 (0.2, p.combine, "s"))):
                _launch_band(ax, x + off, [pair[k] for pair in p.launches], c)
                _whisker(ax, x + off, trio, c, mk)
                _launch_dots(ax, x + off, [pair[k] for pair in p.launches], c)
                highs += [v for pair in p.launches if (v := pair[k]) is not None]
            if p.noise_floor_pct is not None:
                ax.annotate(f"noise ±{p.noise_floor_pct:.3g}%", (x, 1),
                            xycoords=("data", "axes fraction"), xytext=(0, -10),
                            textcoords="offset points", ha="center", fontsize=6.5, color="0.3")
        ax.set_ylim(0, (max(highs) * 1.15) if highs else 1.0)
        ax.set_xlim(-0.6, len(pts) - 0.4)
        ax.set_xticks(range(len(pts)), [p.backend for p in pts], rotation=rotation,
                      fontsize=TICK_FONT)     # name_layout: the names never overlap
        caps = sorted({p.capacity for p in pts if p.capacity})
        ax.set_title(f"{model}\ncapacity {', '.join(caps) or '?'}", fontsize=9)
    panels[0][0].set_ylabel("time per call (ms)")
    whisk = "p10–p90" if not missing_p10 else "median–p90 (p10 not recorded)"
    handles = [
        Line2D([], [], ls="", marker="o", color="0.2", label="dispatch median"),
        Line2D([], [], ls="", marker="s", color="0.2", label="combine median"),
        Line2D([], [], color="0.2", label=f"whisker: {whisk}"),
        Patch(color="0.2", alpha=0.2, label="range of the launch medians (min–max)"),
        Line2D([], [], ls="", marker="o", mfc="none", color="0.2", ms=4,
               label="one launch's median (independent process start)"),
        Patch(fill=False, hatch=PLACEHOLDER_HATCH, ec="0.45", label="does not fit / not timed (drops: unequal work)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7.5)
    fig.suptitle("Dispatch and combine time at each model's common timing capacity",
                 fontsize=11)
    save_png(fig, path)
    return fig
