"""Figures a reader can read: the demand heatmap's colour scale does not make a 1-3% excess
look hot (failed on the scale spanning the data's own min..max), and the timing figure's
backend tick labels never overlap (a guard: not seen failing on the earlier figure at these
name lengths)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.figures import DemandMap, TimePoint, plot_demand, plot_timing
from harness.vocab import Status

SETTINGS = settings(max_examples=4, deadline=None,
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
@given(names=st.lists(st.text("abcdefghijklmnopqrstuvwxyz_~-", min_size=4, max_size=16),
                      min_size=3, max_size=5, unique=True))
def test_timing_tick_labels_do_not_overlap(tmp_path, names):
    pts = [TimePoint("M", n, Status.OK, (1.0, 1.2, 1.5), (0.8, 0.9, 1.1), 2.0, "1.0625")
           for n in names]
    fig = plot_timing(pts, tmp_path / "t.png", missing_p10=False)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        for a, b in zip(boxes, boxes[1:], strict=False):
            assert not a.overlaps(b), [t.get_text() for t in ax.get_xticklabels()]
