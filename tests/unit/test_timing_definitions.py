"""One definition per statistic: comparison.tsv's ratio is the ratio of the medians timing.tsv
shows (docs/timing-verdicts.md#definitions), for any launches and trials hypothesis draws.

Before the fix timing.tsv printed the median of the launches' own step medians while the
ratio divided pooled trial medians; the property below failed on that code (e.g. DEEPSEEK's
A/A combine: 1.187 in one table, 0.949 from the other).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.timing import verdicts

ms = st.floats(min_value=0.05, max_value=50.0, allow_nan=False, allow_infinity=False)


def timing_object(dispatch: list[float], combine: list[float], steps: list[float]) -> dict:
    """A launch's [EPCAP_TIMING] object: its own step medians (`steps`, which a backend
    computes over every step, not from the trials) and its per-trial medians."""
    return {"per_trial": [{"dispatch_ms_median": d, "combine_ms_median": c}
                          for d, c in zip(dispatch, combine, strict=True)],
            "dispatch_ms_median": steps[0], "combine_ms_median": steps[1],
            "dispatch_ms_p10": steps[0], "dispatch_ms_p90": steps[0],
            "combine_ms_p10": steps[1], "combine_ms_p90": steps[1],
            "trials": len(dispatch), "iters": 3}


@st.composite
def arm(draw, launches: int, trials: int) -> list[dict | None]:
    """One arm's rounds: a timing object, or None (a round whose launch measured nothing)."""
    out: list[dict | None] = []
    for _ in range(launches):
        if draw(st.integers(0, 5)) == 0:
            out.append(None)
            continue
        d = draw(st.lists(ms, min_size=trials, max_size=trials))
        c = draw(st.lists(ms, min_size=trials, max_size=trials))
        out.append(timing_object(d, c, draw(st.lists(ms, min_size=2, max_size=2))))
    return out


@st.composite
def two_arms(draw) -> tuple[list, list]:
    launches, trials = draw(st.integers(2, 5)), draw(st.integers(1, 4))
    return draw(arm(launches, trials)), draw(arm(launches, trials))


def table_median(launches: list[dict | None], phase: str) -> float | None:
    """timing.tsv's median of one arm, as the time step builds its row."""
    figures = verdicts.launch_figures([("ok", t) for t in launches])
    return figures.get(f"{phase}_ms_median")


@settings(max_examples=80, deadline=None, derandomize=True)
@given(two_arms())
def test_ratio_is_the_ratio_of_the_timing_medians(arms):
    backend, baseline = arms
    rows = verdicts.comparison_rows("c", "M", {"a": baseline, "b": backend}, "a",
                                    max_cv=1.0)
    for row in rows:
        if row["ratio_median"] is None:
            continue
        b, a = table_median(backend, row["phase"]), table_median(baseline, row["phase"])
        shown = b / a
        # the direction can never disagree ...
        assert math.copysign(1, math.log(row["ratio_median"])) == \
            math.copysign(1, math.log(shown)) or math.isclose(shown, 1.0, rel_tol=1e-12)
        # ... because it is the same number
        assert row["ratio_median"] == pytest.approx(shown, rel=1e-12)
        assert row["ci_low"] is None or row["ci_low"] <= row["ratio_median"] <= row["ci_high"]


def test_the_launch_median_is_the_one_figure_four_and_timing_launches_use():
    t = timing_object([1.0, 3.0, 2.0], [4.0, 4.0, 5.0], [9.0, 9.0])
    assert verdicts.launch_medians([t], "dispatch") == [2.0]        # not the step median 9
    assert verdicts.launch_stats(t, "combine")["median_ms"] == 4.0
