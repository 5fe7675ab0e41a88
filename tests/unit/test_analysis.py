"""harness.pipeline.analysis: a finished run's logs to its status, attempt row and per-step
peaks, and the finish label; generated logs, no process."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
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
@example(start=datetime(2026, 1, 1), wall=0.0)
@example(start=datetime(2026, 1, 1), wall=1e9)
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


def test_utc_labels_are_utc_whatever_the_local_zone(monkeypatch):
    """Labels are UTC on a machine set to another zone. Catches the local clock's label."""
    import time
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")     # UTC+14: never the UTC date-hour
    time.tzset()
    try:
        now = datetime.now(timezone.utc)
        assert abs(parse(utc_now()) - now) < timedelta(seconds=5)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


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
       wall=st.floats(0.5, 100), malformed=st.integers(0, 2), attempt=st.integers(1, 3))
def test_analyse_turns_logs_into_the_status_and_row(tmp_path_factory, purpose, saturate,
                                                    timed_line, extra, wall, malformed,
                                                    attempt):
    """Saturated rows make a measure a lower bound and any other run drops; a clean run is
    ok; a timed run without its timing line is a crash. The row states the rows, the peak
    (only when measured), the budget, the finish label; per-step peaks only for measure and
    validate runs. Catches a status rule flipped, a peak stated for a failed run, and a
    timed run without its figures taken as ok."""
    cell = Cell(RB.campaign, RB.models[0].name, "echo", purpose, "2.00", attempt)
    cdir = tmp_path_factory.mktemp("cell")
    req = RunRequest.for_cell(RB, cell, cdir)
    n = req.shape.uniform_tokens(req.model.topk)
    peak = n + extra
    for rank, text in dispatch_rows(req, peak, saturate).items():
        if purpose == Purpose.TIME and timed_line and rank == 0:
            text += ('[EPCAP_TIMING] {"dispatch_ms_median": 1.0, "combine_ms_median": 2.0, '
                     '"per_trial": []}\n')
        if rank == 1:
            text += "[MOE_DROP_DEBUG][dispatch] iter=0 layer=1 rank=1 budget=x\n" * malformed
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
    assert out.cell == cell
    assert out.summary.expected_ranks == req.shape.ep and out.summary.complete  # its shape
    again = analyse(req, backend, JobResult("completed", 0, [], wall), cdir, START)
    assert again.row == out.row          # no log paths given: the cell's rank logs are read
    row = out.row
    assert (row.campaign, row.model, row.backend, row.purpose, row.attempt, row.capacity) \
        == (cell.campaign, cell.model, cell.backend, cell.purpose, cell.attempt, cell.capacity)
    assert row.capacity_tag == cap.capacity_tag("2.00") and row.started_utc == START
    assert row.backend_impl == backend.implementation(out.timing) is not None
    assert row.malformed_rows == malformed
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
        assert out.failure["status"] == Status.CRASH
    if purpose != Purpose.TIME or want == Status.CRASH:
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
    assert (out.row.rows, out.row.peak_actual_valid_recv, out.row.malformed_rows,
            out.row.saturated_rows) == (0, None, 0, 0)


def test_a_failed_run_states_its_deciding_line(tmp_path):
    """A run the taxonomy classes as failed carries the deciding line in its row. Catches the
    failure line dropped from capacity_attempts.tsv."""
    import shutil
    cell = Cell(RB.campaign, RB.models[0].name, "echo", Purpose.VALIDATE, "2.00", 1)
    cdir = tmp_path / "cell"
    shutil.copytree(ROOT / "tests" / "fixtures" / "classify" / "nccl_ep_overflow_trap", cdir)
    req = RunRequest.for_cell(RB, cell, cdir)
    backend = load_backend(RB.backend("echo"))
    out = analyse(req, backend, JobResult("failed", 1, sorted(cdir.glob("rank*.log"))), cdir,
                  START)
    assert out.failure["status"] and out.failure["line"]
    assert out.row.failure_line == out.failure["line"]


def test_a_missing_rank_log_is_an_incomplete_summary(tmp_path):
    """The summary is held to the backend's expected shape (ranks x layers x iterations):
    a run whose rank 1 wrote nothing is incomplete. Catches the shape left out, which
    would infer it from the rows seen and call one rank's rows complete."""
    cell = Cell(RB.campaign, RB.models[0].name, "echo", Purpose.VALIDATE, "2.00", 1)
    req = RunRequest.for_cell(RB, cell, tmp_path)
    n = req.shape.uniform_tokens(req.model.topk)
    (tmp_path / "rank0.log").write_text(dispatch_rows(req, n, False)[0])
    backend = load_backend(RB.backend("echo"))
    out = analyse(req, backend, JobResult("completed", 0, [tmp_path / "rank0.log"], 1.0),
                  tmp_path, START)
    assert out.summary.complete is False and out.summary.missing_rows > 0
