"""Figures a reader can read: the demand heatmap's colour scale does not make a 1-3% excess
look hot (failed on the scale spanning the data's own min..max), nor does the
over-provisioning axis stretch a small share to fill the plot (its scale reaches one grid
step above each peak; failed on the axis ending at 1.25 x the tallest bar), the timing figure's backend
tick labels never overlap (bounding boxes measured after a draw; failed on the two earlier
figures), and no forecast series hides under another."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness.figures import (
    CapPoint,
    DemandMap,
    TimePoint,
    grid_step_pct,
    plot_demand,
    plot_overprovision,
    plot_timing,
)
from harness.vocab import Status

SETTINGS = settings(max_examples=4, deadline=None, phases=(Phase.explicit, Phase.reuse,
                                                            Phase.generate),   # drawing is slow
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(excess=st.floats(0.0, 0.03), ranks=st.integers(2, 8), layers=st.integers(1, 12),
       seed=st.integers(0, 1000))
def test_a_small_excess_stays_cool(tmp_path, excess, ranks, layers, seed):
    rng = np.random.default_rng(seed)
    ratio = 1.0 + excess * rng.random((ranks, layers))
    m = DemandMap("run", "echo", list(range(ranks)), list(range(layers)), ratio,
                  np.zeros_like(ratio, dtype=bool), 1.1)
    fig = plot_demand("M", [m], tmp_path / "d.png")
    lo, hi = fig.axes[0].images[0].get_clim()
    assert (ratio.max() - lo) / (hi - lo) <= 0.2, (lo, hi, ratio.max())


@SETTINGS
@given(rows=st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.sampled_from(["e", "u"]),
                               st.integers(256, 40000), st.floats(0.5, 2.0)),
                     min_size=1, max_size=6, unique_by=lambda r: r[:2]),
       pad=st.sampled_from([64, 128, 256]), steps=st.floats(0.0, 1.0))
def test_over_provisioning_is_drawn_against_one_grid_step(tmp_path, rows, pad, steps):
    """Every bar's height is read against the grid's own rounding: the axis reaches at least
    one pad multiple above every peak, and a bar inside one step sits under that mark."""
    points = []
    for model, backend, n, required in rows:
        peak = required * n
        over = 1.0 + steps * pad / peak             # a selection within one grid step
        points.append(CapPoint(model, backend, n, required, required * over, over,
                               str(required), str(required * over)))
    fig = plot_overprovision(points, tmp_path / "o.png", pad)
    ax = fig.axes[0]
    top = ax.get_ylim()[1]
    for p in points:
        assert grid_step_pct(p, pad) <= top
        assert (p.over_provision - 1) * 100 <= grid_step_pct(p, pad) + 1e-9
    assert len(ax.collections) == len(points)       # one dashed step mark per bar


def test_a_few_percent_over_provisioning_does_not_fill_the_axis(tmp_path):
    """The default campaign's shape: 2126 tokens at peak, 2176 selected (+2.35%), pad 128:
    the bar is under half the axis (it filled 80% with the axis at 1.25 x the bar)."""
    p = CapPoint("QWEN2_57B", "echo", 2048, 2126 / 2048, 2176 / 2048, 2176 / 2126,
                 "1.038086", "1.0625")
    ax = plot_overprovision([p], tmp_path / "o.png", 128).axes[0]
    assert (2176 / 2126 - 1) * 100 / ax.get_ylim()[1] < 0.5


NAME = st.text("abcdefghijklmnopqrstuvwxyz0123456789_~.-", min_size=2, max_size=40)


def _label_boxes(fig):
    """Every drawn x tick label's window bounding box (Agg renderer, after a draw)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes
            for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]


@SETTINGS
@given(models=st.integers(1, 5), names=st.lists(NAME, min_size=2, max_size=7, unique=True))
def test_timing_tick_labels_do_not_overlap(tmp_path, models, names):
    """No two backend labels overlap, within a panel or across neighbouring panels, for any
    number of models and backends and names up to 40 characters (measured after a draw;
    failed on the figure before f9e6f81 and on f9e6f81's 30-degree labels)."""
    pts = [TimePoint(f"MODEL_{m}", n, Status.OK, (1.0, 1.2, 1.5), (0.8, 0.9, 1.1), 2.0,
                     "1.0625") for m in range(models) for n in names]
    boxes = _label_boxes(plot_timing(pts, tmp_path / "t.png", missing_p10=False))
    assert len(boxes) == len(pts)
    for i, (a_text, a) in enumerate(boxes):
        for b_text, b in boxes[i + 1:]:
            assert not a.overlaps(b), (a_text, b_text)


def test_the_default_campaigns_timing_labels_do_not_overlap(tmp_path):
    """The default campaign's own shape: four models, four backends (echo~control the
    longest name); failed on both earlier figures (horizontal, then 30-degree labels)."""
    names = ["echo", "ultraep", "moonep", "echo~control"]
    pts = [TimePoint(m, n, Status.OK, (1.0, 1.2, 1.5), (0.8, 0.9, 1.1), 2.0, "1.0625")
           for m in ("QWEN2_57B", "QWEN3_30B", "QWEN3_235B", "DEEPSEEK_V2_LITE") for n in names]
    boxes = _label_boxes(plot_timing(pts, tmp_path / "t.png", missing_p10=False))
    for i, (a_text, a) in enumerate(boxes):
        for b_text, b in boxes[i + 1:]:
            assert not a.overlaps(b), (a_text, b_text)


def _forecast_rows(draw_models, series, eps, caps):
    rows = []
    for m in range(draw_models):
        for s, name in enumerate(series):
            for e, ep in enumerate(eps):
                req, sel = caps[(m + s + e) % len(caps)]
                rows.append({"model": f"M{m}", "source": "t.jsonl", "personality": name,
                             "placement": "contiguous", "unit": "slots", "ep": ep,
                             "required_capacity": req, "selected_capacity": sel, "steps": 7})
    return rows


def _hidden_series(fig, px: float = 3.0) -> list[str]:
    """Lines a reader cannot see: a marker of one series within `px` pixels of a marker of
    another series drawn above it (the same capacity at the same EP, on top of each other),
    or a series' own marker covered by a filled one drawn above it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    hidden = []
    for ax in fig.axes:
        lines = sorted(ax.get_lines(), key=lambda ln: ln.get_zorder())
        pts = [ax.transData.transform(np.column_stack([ln.get_xdata(), ln.get_ydata()]))
               for ln in lines]
        for i, low in enumerate(lines):
            series = low.get_label().rsplit(":", 1)[0]
            for j in range(i + 1, len(lines)):
                high = lines[j]
                same = high.get_label().rsplit(":", 1)[0] == series
                if same and high.get_markerfacecolor() == "none":
                    continue                        # an open marker over its own filled one
                close = np.hypot(*(pts[i][:, None, :] - pts[j][None, :, :]).T) < px
                if close.any():
                    hidden.append(f"{low.get_label()} under {high.get_label()}")
    return hidden


@settings(max_examples=6, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(models=st.integers(1, 3),
       series=st.lists(st.sampled_from(["echo", "ultraep", "raw", "moonep", "x"]), min_size=1,
                       max_size=4, unique=True),
       eps=st.lists(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), min_size=1, max_size=5,
                    unique=True),
       caps=st.lists(st.sampled_from([(1.0, "1.00"), (1.01, "1.0625"), (1.04, "1.0625"),
                                      (1.0625, "1.0625"), (1.2, "1.25")]), min_size=1,
                     max_size=3))
def test_no_forecast_series_hides_under_another(tmp_path, models, series, eps, caps):
    """Series with equal values (echo and ultraep both select 1.0625 at EP 4) stay visible:
    no marker within 3 px of another series' marker, no two lines with identical data and
    identical style (failed on the figure before: echo's selected line under ultraep's)."""
    from harness.forecast.outputs import plot_forecast

    fig = plot_forecast(_forecast_rows(models, series, sorted(eps), caps), tmp_path / "f.png")
    assert _hidden_series(fig) == []
    for ax in fig.axes:
        drawn = [(tuple(ln.get_xdata()), tuple(ln.get_ydata()), ln.get_marker(),
                  str(ln.get_linestyle()), ln.get_color()) for ln in ax.get_lines()]
        assert len(drawn) == len(set(drawn))


def test_the_default_campaigns_forecast_shows_every_series(tmp_path):
    """The default campaign's case: echo and ultraep select the same capacities at every EP."""
    from harness.forecast.outputs import plot_forecast

    caps = [(1.0036, "1.0417"), (1.028, "1.0834"), (1.0638, "1.167"), (1.0911, "1.334")]
    rows = _forecast_rows(1, ["echo", "ultraep"], [2, 4, 8, 16], caps)
    for r in rows:                                  # the same selected rung for both
        r["selected_capacity"] = caps[[2, 4, 8, 16].index(r["ep"])][1]
    assert _hidden_series(plot_forecast(rows, tmp_path / "f.png")) == []
