"""Per-step peaks (harness.telemetry.steps): one step = one iteration over all its layers and ranks."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.telemetry.steps import StepPeaks, from_columns, step_peaks


def row(it: int, layer: int, rank: int, act: int, budget: int = 100, prefix: str = "") -> str:
    return (f"{prefix}[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} rank={rank} "
            f"expected_recv=64 actual_valid_recv={act} budget={budget}\n")


def test_a_step_peak_is_the_max_over_its_layers_and_ranks():
    steps = from_columns(iters=[0, 0, 0, 1, 1, 2], actual=[70, 95, 80, 60, 99, 50],
                         budget=[100] * 6)
    assert steps.iters == (0, 1, 2)
    assert steps.peaks == (95, 99, 50)
    assert steps.saturated == (False, False, False)
    assert steps.steps == 3 and steps.drops == 0 and steps.peak == 99


def test_a_step_drops_when_any_row_is_saturated_even_at_equality():
    # act == budget is saturation (the buffer is full): the step's peak is a lower bound
    steps = from_columns(iters=[0, 0, 1, 1, 2], actual=[100, 10, 99, 20, 101],
                         budget=[100, 100, 100, 100, 101])
    assert steps.saturated == (True, False, True)
    assert steps.drops == 2
    assert steps.exact_peaks() == [99]


def test_warmup_iterations_are_not_steps():
    steps = from_columns(iters=[0, 1, 2], actual=[999, 5, 6], budget=[1000] * 3, warmup=1)
    assert steps.iters == (1, 2) and steps.peaks == (5, 6)


@pytest.mark.parametrize("kw", [dict(warmup=-1), dict(budget=[1])])
def test_bad_columns_are_bad_input(kw):
    args = dict(iters=[0, 1], actual=[1, 2], budget=[3, 3]) | kw
    with pytest.raises(BadInput):
        from_columns(**args)


def test_step_peaks_from_logs_any_order_prefixes_and_two_files(tmp_path):
    a, b = tmp_path / "rank0.log", tmp_path / "rank1.log"
    a.write_text(row(1, 0, 0, 70, prefix="[rank0]: ") + "noise\n" + row(0, 1, 0, 40)
                 + "[MOE_DROP_DEBUG][dispatch] iter=1 layer=0 rank=0 broken\n")
    b.write_text(row(0, 0, 1, 90, prefix="1: ") + row(1, 1, 1, 100) + row(2, 0, 1, 33))
    steps = step_peaks([a, b])
    assert steps == StepPeaks((0, 1, 2), (90, 100, 33), (False, True, False))
    assert step_peaks([a, b], warmup=2) == StepPeaks((2,), (33,), (False,))
    assert step_peaks([tmp_path / "rank0.log"], warmup=5) == StepPeaks((), (), ())
    with pytest.raises(BadInput):
        step_peaks([a], warmup=-1)


def test_dict_round_trip_and_bad_shapes():
    steps = StepPeaks((0, 1), (5, 7), (False, True))
    assert StepPeaks.from_dict(steps.to_dict()) == steps
    with pytest.raises(BadInput):
        StepPeaks.from_dict({"iters": [0], "peaks": [1, 2], "saturated": [False]})
    with pytest.raises(BadInput):
        StepPeaks.from_dict({"iters": [0]})
    assert StepPeaks((), (), ()).peak is None


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3),
                               st.integers(0, 200), st.integers(1, 200)).map(
                                   lambda r: (*r[:3], min(r[3], r[4]), r[4])), max_size=40),
       warmup=st.integers(0, 6))
def test_step_peaks_from_logs_equal_from_columns(rows, warmup):
    """Generated rows (iteration, layer, rank, actual_valid_recv, budget), written to two
    logs: the logs' reader (a numpy group-by) agrees with the plain per-row loop of
    from_columns. Catches a max taken over the wrong column, `>` for `>=` in saturation,
    warmup rows kept, or steps out of order."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "rank0.log", Path(tmp) / "rank1.log"
        a.write_text("".join(row(it, ly, rk, v, budget=bd) for it, ly, rk, v, bd in rows[::2]))
        b.write_text("".join(row(it, ly, rk, v, budget=bd) for it, ly, rk, v, bd in rows[1::2]))
        got = step_peaks([a, b], warmup=warmup)
    want = from_columns([r[0] for r in rows], [r[3] for r in rows], [r[4] for r in rows],
                        warmup=warmup)
    assert got == want
