"""One finished run: telemetry summary + failure taxonomy + timing line -> its Outcome.

The status of a run (docs/spec.md: pipeline; harness.taxonomy.judge.judge_run, the code `epcap
classify` runs too): a taxonomy class when the run failed; else `lower_bound` (a measure run
with saturated rows or an overflow report), `drops` (any other run with saturated rows or an
overflow report, docs/taxonomy.md) or `ok`; a timed run without its [EPCAP_TIMING] line is a
`crash`. The failure dict (cell.json, events) carries the deciding line, the first failed
rank, the survived warnings and any stated receive demand.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from harness.api.backend import Backend, RunRequest
from harness.api.launcher import JobResult
from harness.grid import capacity as cap
from harness.pipeline.decisions import Outcome
from harness.results.layout import Cell
from harness.results.rows import AttemptRow
from harness.taxonomy.judge import cell_layout, cell_logs, judge_run
from harness.telemetry.steps import step_peaks
from harness.telemetry.summary import LogSummary, summarize
from harness.vocab import FAILURE_CLASSES, TIMED_OK, Purpose, Status, run_timed

STEP_PURPOSES = (Purpose.MEASURE, Purpose.VALIDATE)   # runs whose per-step peaks are kept


UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> str:
    """The wall clock as a label (never subtracted: durations are monotonic)."""
    return datetime.now(timezone.utc).strftime(UTC_FORMAT)


def finished_label(started_utc: str, wall_s: float | None) -> str:
    """The finish label of a run: its start label plus its monotonic duration, so a clock
    stepped back (or forward) during the run cannot write a row that ends before it starts."""
    try:
        start = datetime.strptime(started_utc, UTC_FORMAT).replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return utc_now()
    if wall_s is None or not 0 <= wall_s < 10**9:
        return max(utc_now(), started_utc)       # ISO labels order as text
    return (start + timedelta(seconds=wall_s)).strftime(UTC_FORMAT)


def analyse(req: RunRequest, backend: Backend, result: JobResult, cell_dir: Path,
            started_utc: str, summary: LogSummary | None = None) -> Outcome:
    """Classify, summarize and time one finished run; returns its Outcome with the row.

    The campaign calls it when a run ends; the audit calls it on an upload's cell (with the
    summary it already read from the same logs, `summary`), so both judge by this code."""
    cell = req.cell
    logs = [p for p in (result.log_paths or sorted(cell_dir.glob("rank*.log")))
            if Path(p).is_file()]
    if summary is None and logs:
        summary = summarize(logs, tags=backend.telemetry_tags(),
                            **backend.expected_log_shape(req))
    # the taxonomy reads the cell's logs as `epcap classify` does (slurm-*.out included)
    verdict = judge_run(result.exit_code, result.state, cell_logs(cell_dir, logs),
                        backend.failure_patterns(), purpose=cell.purpose,
                        library=getattr(backend, "library", None), summary=summary,
                        tags=backend.telemetry_tags(), layout=cell_layout(cell_dir))
    failure = verdict.outcome.to_dict()
    status = verdict.status
    timing = None
    if run_timed(cell.purpose) and status in TIMED_OK:
        timing = backend.timing_of(logs)
        if timing is None:
            status = Status.CRASH
            failure.update(status=Status.CRASH, reason="no [EPCAP_TIMING] line in the logs")
    n = req.shape.uniform_tokens(req.model.topk)
    row = attempt_row(cell, n, backend.implementation(timing), result, summary, status,
                      failure, started_utc)
    steps = None                     # every iteration is a step, as in the requirement
    if summary is not None and summary.rows and cell.purpose in STEP_PURPOSES \
            and status not in FAILURE_CLASSES:
        steps = step_peaks(logs, tags=backend.telemetry_tags())
    return Outcome(cell, status, summary, timing, row, failure, steps)


def attempt_row(cell: Cell, n: int, impl: str, result: JobResult, summary: LogSummary | None,
                status: str, failure: dict, started_utc: str) -> AttemptRow:
    """The capacity_attempts.tsv row of one run (docs/spec.md: TSV columns)."""
    measured = summary is not None and summary.rows > 0 and status not in FAILURE_CLASSES
    return AttemptRow(
        campaign=cell.campaign, model=cell.model, backend=cell.backend,
        purpose=cell.purpose, attempt=cell.attempt, capacity=cell.capacity,
        capacity_tag=cap.capacity_tag(cell.capacity), uniform_tokens=n,
        budget_tokens=cap.budget_tokens(cell.capacity, n), status=status,
        rows=summary.rows if summary else 0,
        malformed_rows=summary.malformed_rows if summary else 0,
        saturated_rows=summary.saturated_rows if summary else 0,
        peak_actual_valid_recv=summary.peak_actual_valid_recv if measured else None,
        required_capacity=summary.required_capacity if measured else None,
        cell_dir=f"cells/{cell.name}", started_utc=started_utc,
        finished_utc=finished_label(started_utc, result.wall_s), wall_s=result.wall_s,
        backend_impl=impl,
        exit_code=result.exit_code,
        failure_line=failure.get("line") if failure.get("status") else None,
    )
