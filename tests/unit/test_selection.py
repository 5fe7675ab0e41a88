"""Selection: requirement, re-measure, select, validation verdict, timing capacity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.grid.capacity import budget_tokens, format_capacity, is_executable, step_up, to_decimal
from harness.grid.selection import (
    Requirement,
    Selection,
    remeasure_capacity,
    requirement,
    select,
    steps_up,
    timing_capacity,
    validation_ok,
    validation_verdict,
)
from harness.telemetry.summary import LogSummary
from harness.vocab import Status

N = 65536
FAST = settings(max_examples=50, deadline=None, derandomize=True)


def summary(**kw) -> LogSummary:
    """A measure/validate summary with sensible defaults."""
    base = {"rows": 10, "expected_recv": N, "peak_actual_valid_recv": 67457, "lower_bound": False,
            "saturated_rows": 0, "malformed_rows": 0, "complete": True, "missing_rows": 0}
    base.update(kw)
    return LogSummary(**base)


def test_requirement_from_a_summary_and_from_its_json_dict():
    req = requirement(summary())
    assert req == Requirement(peak=67457, uniform_tokens=N, required_capacity=67457 / N,
                              lower_bound=False)
    assert requirement(summary().to_dict()) == req
    assert requirement(summary(lower_bound=True)).lower_bound is True


@pytest.mark.parametrize("kw", [{"rows": 0}, {"peak_actual_valid_recv": None}])
def test_no_rows_no_requirement(kw):
    with pytest.raises(BadInput) as info:
        requirement(summary(**kw))
    assert str(info.value) == "rows: the measurement has no used dispatch rows: no requirement"


def test_select_exact_and_legacy():
    req = requirement(summary())
    assert select(req) == Selection("1.03125", 67584, 67584 / 67457)
    assert select(req, 128, decimals=2) == Selection("1.25", 81920, 81920 / 67457)
    assert select(req, 64).capacity == "1.03028"   # 67520 slots = 1055 x 64
    assert budget_tokens("1.03028", N) == 67520
    assert budget_tokens("1.0303", N) == 67521     # the shorter neighbour is not executable


def test_a_lower_bound_is_never_selected():
    with pytest.raises(BadInput) as info:
        select(requirement(summary(lower_bound=True)))
    assert str(info.value) == ("lower_bound: the requirement is only a lower bound (saturated "
                               "rows): re-measure at a larger capacity before selecting")


@FAST
@given(peak=st.integers(N, 4 * N), pad=st.sampled_from([1, 64, 128]),
       decimals=st.sampled_from([None, 2, 3]))
def test_selection_covers_the_peak_and_is_executable(peak, pad, decimals):
    sel = select(Requirement(peak, N, peak / N, False), pad, decimals)
    assert is_executable(sel.capacity, N, pad)
    assert sel.budget == budget_tokens(sel.capacity, N) >= peak
    assert sel.over_provision == sel.budget / peak >= 1.0


def test_remeasure_doubles_the_saturated_budget():
    assert remeasure_capacity("2.00", N, 128, 2 * N) == "4.00"
    assert remeasure_capacity("1.25", N, 128, 81920) == "2.50"
    # a peak reported above the budget (never from a clipping buffer) still counts
    assert remeasure_capacity("1.25", N, 128, 90000) == "2.74805"
    assert budget_tokens("2.74805", N) == 180096 == -(-180000 // 128) * 128


@FAST
@given(units=st.integers(1, 400), pad=st.sampled_from([1, 128]))
def test_remeasure_is_larger_and_executable(units, pad):
    current = f"{units / 100:.2f}"
    budget = budget_tokens(current, N)
    nxt = remeasure_capacity(current, N, pad, budget)
    assert is_executable(nxt, N, pad)
    assert budget_tokens(nxt, N) >= 2 * budget
    assert budget_tokens(nxt, N) - pad < 2 * budget


def test_validation_verdicts():
    assert validation_verdict(summary()) == "accept"
    assert validation_verdict(summary(saturated_rows=1)) == "step_up"
    assert validation_verdict(summary(saturated_rows=1, malformed_rows=3)) == "step_up"
    assert validation_verdict(summary().to_dict()) == "accept"


@pytest.mark.parametrize(("kw", "message"), [
    ({"rows": 0}, "rows: the validation run has no dispatch rows: zero drops not shown"),
    ({"malformed_rows": 2}, "malformed_rows: 2 malformed rows: zero drops not shown"),
    ({"complete": False, "missing_rows": 5}, "complete: rows missing (5 of the ranks x layers "
                                             "x iterations grid): zero drops not shown"),
])
def test_validation_that_cannot_show_zero_drops_is_bad_input(kw, message):
    with pytest.raises(BadInput) as info:
        validation_verdict(summary(**kw))
    assert str(info.value) == message


def test_step_up_loop_is_one_rung_per_attempt():
    capacity, budgets = "1.03125", []
    for _ in range(3):
        capacity = step_up(capacity, N)
        budgets.append(budget_tokens(capacity, N))
    assert budgets == [67712, 67840, 67968]


def test_timing_capacity_is_the_max_by_value_not_by_string():
    assert timing_capacity({"ECHO": "1.03125", "UltraEP": "1.25"}) == "1.25"
    assert timing_capacity({"ECHO": "10.00", "UltraEP": "9.50"}) == "10.00"  # "9.50" > "10.00"
    assert timing_capacity({"ECHO": "2", "UltraEP": "1.5"}) == "2.00"
    assert timing_capacity({"ECHO": "1.1"}) == "1.10"
    assert timing_capacity({"ECHO": "1.25", "UltraEP": "1.03125", "MoonEP": "1.5"}) == "1.50"
    with pytest.raises(BadInput) as info:
        timing_capacity({})
    assert str(info.value) == "timing_capacity: no selected capacities to time at"


# --- the validate step's acceptance and step-up, against their contracts -------------------

@FAST
@given(rows=st.integers(0, 3), saturated=st.integers(0, 2), malformed=st.integers(0, 2),
       complete=st.booleans(), as_dict=st.booleans())
def test_validation_ok_is_zero_drops_shown(rows, saturated, malformed, complete, as_dict):
    """A validate run is accepted only when it shows zero drops: rows present, none saturated,
    none malformed, none missing. Catches an acceptance that lets one of the four through
    (a mutant of any condition of validation_verdict, or an `== "accept"` flipped)."""
    s = summary(rows=rows, saturated_rows=saturated, malformed_rows=malformed,
                complete=complete, missing_rows=0 if complete else 1)
    shown = rows > 0 and saturated == 0 and malformed == 0 and complete
    assert validation_ok(s.to_dict() if as_dict else s) is shown
    if rows and saturated:           # drops seen: a verdict, whatever else is wrong
        assert validation_verdict(s) == "step_up"


DROPS_OR_NOT = st.sampled_from(list(Status))


@FAST
@given(status=DROPS_OR_NOT, accepted=st.booleans(), step=st.integers(0, 6),
       max_steps=st.integers(0, 6))
def test_steps_up_only_after_unaccepted_drops_with_steps_left(status, accepted, step, max_steps):
    """One rung up follows a validate run only when it dropped tokens, was not accepted and
    fewer than max_steps steps were taken. Catches a step-up after an accepted run, after a
    failure (not drops), or one rung past the bound (`<` turned `<=`)."""
    want = status == Status.DROPS and not accepted and step < max_steps
    assert steps_up(status, accepted, step, max_steps) is want


@FAST
@given(max_steps=st.integers(0, 6), drops_first=st.integers(0, 8))
def test_the_validate_loop_is_bounded_by_max_steps(max_steps, drops_first):
    """Driven as the validate step drives it: runs that drop `drops_first` times then are
    accepted make min(drops_first, max_steps) + 1 validate runs, never more than
    max_steps + 1. Catches an unbounded or off-by-one step-up."""
    runs = 0
    for step in range(max_steps + 1):
        runs += 1
        dropped = step < drops_first
        status, accepted = (Status.DROPS, False) if dropped else (Status.OK, True)
        if not steps_up(status, accepted, step, max_steps):
            break
    assert runs == min(drops_first, max_steps) + 1


@FAST
@given(st.dictionaries(st.sampled_from(["echo", "ultraep", "moonep", "x"]),
                       st.integers(100, 100000).map(lambda u: f"{u / 1000:.3f}"),
                       min_size=1))
def test_timing_capacity_is_the_largest_selected_by_value(selected):
    """The timing capacity is the largest selected capacity by value, formatted as a
    capacity. Catches max by string order (or min) and an unformatted value."""
    got = timing_capacity(selected)
    assert to_decimal(got) == max(to_decimal(v) for v in selected.values())
    assert got == format_capacity(max(selected.values(), key=to_decimal))
    assert got in {format_capacity(v) for v in selected.values()}
