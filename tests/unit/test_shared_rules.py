"""The rules the harness decides by and the audit re-derives with, each in one home
(grid.selection, timing.verdicts, runbook.model, results.rows): checked against a literal
statement of the rule over every input of its family, so a changed rule fails here before
it can make the driver and the audit disagree."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from harness.grid.selection import steps_up, validation_ok
from harness.results.rows import SELECTION_COLUMNS, SelectionRow
from harness.timing import verdicts
from harness.vocab import TIMED_OK, Status

STATUSES = [str(s) for s in Status]
TIMING = {"dispatch_ms_median": 1.0, "combine_ms_median": 2.0}


def test_a_validate_run_steps_up_only_after_drops_with_steps_left():
    for status, accepted, max_steps in itertools.product(STATUSES, (True, False), range(4)):
        for step in range(max_steps + 1):
            expect = status == Status.DROPS and not accepted and step != max_steps
            assert steps_up(status, accepted, step, max_steps) is expect, \
                (status, accepted, step, max_steps)


@given(st.lists(st.sampled_from(STATUSES), min_size=1, max_size=6))
def test_a_timing_row_takes_the_first_status_that_is_not_ok(statuses):
    bad = [s for s in statuses if s != Status.OK]
    assert verdicts.row_status(statuses) == (bad[0] if bad else "ok")


@given(st.lists(st.tuples(st.sampled_from(STATUSES), st.booleans()), max_size=6))
def test_figures_come_only_from_launches_that_measured_timing(launches):
    pairs = [(s, dict(TIMING) if has else None) for s, has in launches]
    kept = [t for s, t in pairs if t is not None and s in TIMED_OK]
    assert [verdicts.usable(s, t) for s, t in pairs] == [
        t if (t is not None and s in TIMED_OK) else None for s, t in pairs]
    assert verdicts.launch_figures(pairs) == verdicts.aggregate(kept)


def test_only_out_of_memory_ends_an_arms_launches():
    assert [s for s in STATUSES if verdicts.stops_launches(s)] == [Status.DOES_NOT_FIT]


def test_validation_needs_rows_none_saturated_none_missing():
    ok = {"rows": 4, "saturated_rows": 0, "malformed_rows": 0, "complete": True,
          "missing_rows": 0}
    assert validation_ok(ok)
    for change in ({"rows": 0}, {"saturated_rows": 1}, {"malformed_rows": 1},
                   {"complete": False}):
        assert not validation_ok({**ok, **change}), change


def test_an_unselected_row_states_where_it_measured_and_nothing_else():
    row = SelectionRow.unselected(campaign="c", model="M", backend="b", uniform_tokens=1024,
                                  measured_at_capacity="2.00")
    filled = {c: getattr(row, c) for c in SELECTION_COLUMNS if getattr(row, c) is not None}
    assert filled == {"campaign": "c", "model": "M", "backend": "b", "uniform_tokens": 1024,
                      "measured_at_capacity": "2.00", "validated": False,
                      "validate_attempts": 0}
