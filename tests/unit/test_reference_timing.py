"""Reference timing summary: quantiles, slowest-rank stats, noise floor, algbw, keys."""

from __future__ import annotations

import pytest

from backends.reference.timing import quantile, summarize

KEYS = ("trials", "iters", "dispatch_ms_median", "dispatch_ms_p10", "dispatch_ms_p90",
        "combine_ms_median", "combine_ms_p10", "combine_ms_p90", "step_cv", "noise_floor_pct",
        "algbw_gbps", "algbw_formula", "timer", "backend_impl", "per_trial")


def test_quantile_linear():
    assert quantile([4, 1, 3, 2], 0.5) == 2.5
    assert quantile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)
    assert quantile([7], 0.1) == 7


def test_summarize_values():
    d = [[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]]
    c = [[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]]
    out = summarize(d, c, iters=3, tokens=100, topk=4, hidden=8, bytes_per_element=2,
                    timer="perf_counter")
    assert set(KEYS) <= set(out)
    assert out["dispatch_ms_median"] == 2.0 and out["combine_ms_median"] == 0.75
    assert out["per_trial"] == [{"dispatch_ms_median": 2.0, "combine_ms_median": 0.5},
                                {"dispatch_ms_median": 2.0, "combine_ms_median": 1.0}]
    assert out["noise_floor_pct"] == pytest.approx(100 * (3.0 - 2.5) / 2.75)
    assert out["algbw_gbps"] == pytest.approx(100 * 4 * 8 * 2 / 2e-3 / 1e9)
    assert out["backend_impl"] == "reference"


def test_single_trial_has_no_noise_floor():
    out = summarize([[1.0, 1.0]], [[1.0, 1.0]], 2, 1, 1, 1, 2, "perf_counter")
    assert out["noise_floor_pct"] is None and out["step_cv"] == 0.0
