"""harness.pipeline.analysis: a finished run's logs to its status, attempt row and per-step
peaks, and the finish label; generated logs, no process."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.api.backend import RunRequest
from harness.api.launcher import JobResult
from harness.api.registry import load_backend
from harness.grid import capacity as cap
from harness.pipeline.analysis import UTC_FORMAT, analyse, finished_label, utc_now
from harness.results.layout import Cell
from harness.runbook.load import load_runbook
from harness.vocab import Purpose, Status

ROOT = Path(__file__).resolve().parents[2]
RB = load_runbook(ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml")
FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
START = "2026-12-01T07:00:00Z"


def parse(label: str) -> datetime:
    return datetime.strptime(label, UTC_FORMAT).replace(tzinfo=timezone.utc)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(start=st.datetimes(datetime(2000, 1, 1), datetime(2090, 1, 1)),
       wall=st.one_of(st.none(), st.floats(-1e3, 2e9, allow_nan=False)))
def test_finished_label_is_start_plus_the_monotonic_wall(start, wall):
    """A run's finish label is its start plus its measured duration (whole seconds), never
    before its start; with no usable duration, the later of now and the start. Catches a
    finish taken from a stepped wall clock, or a row that ends before it starts."""
    label = start.replace(microsecond=0).strftime(UTC_FORMAT)
    got = finished_label(label, wall)
    if wall is not None and 0 <= wall < 10**9:
        assert parse(got) == (parse(label) + timedelta(seconds=wall)).replace(microsecond=0)
    elif label > utc_now():
        assert got == label          # a start ahead of the clock: never before the start
    else:
        assert abs(parse(got) - parse(utc_now())) < timedelta(seconds=5)


def test_finished_label_of_an_unreadable_start_is_now():
    """A start label that is not a UTC label gives the wall clock's label. Catches a crash
    on a damaged label."""
    for bad in ("yesterday", None, ""):
        assert abs(parse(finished_label(bad, 5.0)) - parse(utc_now())) < timedelta(seconds=5)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_now())


def dispatch_rows(req: RunRequest, peak: int, saturate: bool) -> dict[int, str]:
    """Complete rank logs of `req`: every rank x layer x iteration one row, the peak at the
    last; saturated (actual = budget) at rank 0's first row when asked."""
    n = req.shape.uniform_tokens(req.model.topk)
    budget = cap.budget_tokens(req.cell.capacity, n)
    logs: dict[int, str] = {}
    for rank in range(req.shape.ep):
        lines = []
        for it in range(req.iterations):
            for layer in range(1, req.model.moe_layers + 1):
                act = min(n + it + layer, budget)
                if rank == 0 and it == 0 and layer == 1 and saturate:
                    act = budget
                if rank == req.shape.ep - 1 and it == req.iterations - 1 \
                        and layer == req.model.moe_layers:
                    act = min(peak, budget)
                lines.append(f"[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} "
                             f"rank={rank} expected_recv={n} actual_valid_recv={act} "
                             f"budget={budget}\n")
        logs[rank] = "".join(lines)
    return logs


@FAST
@given(purpose=st.sampled_from([Purpose.MEASURE, Purpose.VALIDATE, Purpose.TIME]),
       saturate=st.booleans(), timed_line=st.booleans(), extra=st.integers(0, 300),
       wall=st.floats(0.5, 100))
def test_analyse_turns_logs_into_the_status_and_row(tmp_path_factory, purpose, saturate,
                                                    timed_line, extra, wall):
    """Saturated rows make a measure a lower bound and any other run drops; a clean run is
    ok; a timed run without its timing line is a crash. The row states the rows, the peak
    (only when measured), the budget, the finish label; per-step peaks only for measure and
    validate runs. Catches a status rule flipped, a peak stated for a failed run, and a
    timed run without its figures taken as ok."""
    cell = Cell(RB.campaign, RB.models[0].name, "echo", purpose, "2.00", 1)
    cdir = tmp_path_factory.mktemp("cell")
    req = RunRequest.for_cell(RB, cell, cdir)
    n = req.shape.uniform_tokens(req.model.topk)
    peak = n + extra
    for rank, text in dispatch_rows(req, peak, saturate).items():
        if purpose == Purpose.TIME and timed_line and rank == 0:
            text += ('[EPCAP_TIMING] {"dispatch_ms_median": 1.0, "combine_ms_median": 2.0, '
                     '"per_trial": []}\n')
        (cdir / f"rank{rank}.log").write_text(text)
    logs = sorted(cdir.glob("rank*.log"))
    backend = load_backend(RB.backend("echo"))
    out = analyse(req, backend, JobResult("completed", 0, logs, wall), cdir, START)
    if purpose == Purpose.TIME and not timed_line:
        want = Status.CRASH          # drops or not: a timed run without its figures
    elif saturate:
        want = Status.LOWER_BOUND if purpose == Purpose.MEASURE else Status.DROPS
    else:
        want = Status.OK
    assert out.status == want, out.failure
    row = out.row
    rows = req.shape.ep * req.iterations * req.model.moe_layers
    assert (row.status, row.rows, row.saturated_rows) == (want, rows, int(saturate))
    assert row.budget_tokens == cap.budget_tokens("2.00", n) and row.uniform_tokens == n
    measured = want != Status.CRASH
    assert row.peak_actual_valid_recv == (out.summary.peak_actual_valid_recv if measured
                                          else None)
    assert (row.required_capacity is None) is not measured
    assert row.finished_utc == finished_label(START, wall) and row.wall_s == wall
    assert row.cell_dir == f"cells/{cell.name}" and row.exit_code == 0
    if want == Status.OK:
        assert row.failure_line is None and not out.failure.get("status")
    if want == Status.CRASH:
        assert out.failure["reason"] == "no [EPCAP_TIMING] line in the logs"
        assert out.timing is None
    if purpose == Purpose.TIME and want == Status.OK:
        assert out.timing["dispatch_ms_median"] == 1.0
    assert (out.steps is not None) is (purpose != Purpose.TIME)
    if out.steps is not None:
        assert out.steps.peak == out.summary.peak_actual_valid_recv


def test_analyse_without_logs_has_no_summary_and_no_peak(tmp_path):
    """A run that left no logs is judged on its exit alone: no summary, no rows, no peak,
    no steps. Catches figures invented for a run that wrote nothing."""
    cell = Cell(RB.campaign, RB.models[0].name, "echo", Purpose.MEASURE, "2.00", 1)
    req = RunRequest.for_cell(RB, cell, tmp_path)
    backend = load_backend(RB.backend("echo"))
    out = analyse(req, backend, JobResult("failed", 1, [], 1.0), tmp_path, START)
    assert out.summary is None and out.steps is None and out.status != Status.OK
    assert (out.row.rows, out.row.peak_actual_valid_recv, out.row.malformed_rows) == (0, None, 0)
