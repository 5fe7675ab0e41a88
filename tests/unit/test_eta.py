"""The ETA estimator: per backend, per model size, per purpose; not the first cell only."""

from __future__ import annotations

import io

import pytest

from harness.campaign.progress import EtaEstimator, ProgressView, fmt_s, purpose_class

SIZES = {"small": 1.0, "mid": 2.0, "big": 4.0}


def test_no_data_no_number():
    est = EtaEstimator(SIZES)
    assert est.predict("a", "small", "measure") is None
    assert est.eta([("a", "small", "measure")]) is None
    assert fmt_s(None).startswith("unknown")


def test_backends_differ_and_are_learned_separately():
    """A first-cell-only estimator would predict 2 s for backend b: this one says ~6 s."""
    est = EtaEstimator(SIZES)
    for _ in range(3):
        est.add("a", "small", "measure", 2.0)
        est.add("b", "small", "measure", 6.0)
    assert est.predict("a", "small", "measure") == pytest.approx(2.0, rel=0.15)
    assert est.predict("b", "small", "measure") == pytest.approx(6.0, rel=0.15)
    # an unseen model of the same size class inherits each backend's own level
    assert est.predict("b", "other", "measure") > 2 * est.predict("a", "other", "measure")


def test_model_size_extrapolates_to_an_unseen_model():
    """Durations grow with size: the unseen big model is predicted longer than mid."""
    est = EtaEstimator(SIZES)
    for _ in range(2):
        est.add("a", "small", "measure", 2.0)
        est.add("a", "mid", "measure", 4.0)
    big = est.predict("a", "big", "measure")
    assert big == pytest.approx(8.0, rel=0.25)


def test_purpose_classes():
    assert purpose_class("measure") == purpose_class("validate") == "select"
    est = EtaEstimator(SIZES)
    for _ in range(3):
        est.add("a", "small", "measure", 2.0)
        est.add("a", "small", "time", 8.0)
    assert est.predict("a", "small", "validate") == pytest.approx(2.0, rel=0.2)
    assert est.predict("a", "small", "time") == pytest.approx(8.0, rel=0.2)


def test_eta_sums_and_divides_by_parallel():
    est = EtaEstimator(SIZES)
    for _ in range(4):
        est.add("a", "small", "measure", 3.0)
    left = [("a", "small", "measure")] * 4
    assert est.eta(left) == pytest.approx(12.0, rel=0.05)
    assert est.eta(left, parallel=2) == pytest.approx(6.0, rel=0.05)


def test_fmt_s():
    assert fmt_s(12.34) == "12.3 s" and fmt_s(125) == "2 min 05 s" and fmt_s(3720) == "1 h 02 min"


def test_view_without_tty_prints_lines_only():
    out = io.StringIO()
    view = ProgressView(stream=out)
    view.start(0, 3)
    view.update(1, 3, "measure", 1, 2, 5.0, "cell")
    view.line("banner")
    view.stop()
    assert out.getvalue() == "banner\n"


def test_unmeasured_purpose_scales_with_its_iterations():
    """canary (1 iter) 2 s, select (4 iters) 4 s: time (16 iters) predicted 8 s, not 4 s."""
    est = EtaEstimator(SIZES, {"canary": 1, "select": 4, "time": 16})
    for _ in range(3):
        est.add("a", "small", "canary", 2.0)
        est.add("a", "small", "measure", 4.0)
    assert est.predict("a", "small", "time") == pytest.approx(8.0, rel=0.2)
    assert EtaEstimator(SIZES).predict("a", "small", "time") is None
