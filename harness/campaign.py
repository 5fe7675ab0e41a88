"""The campaign runner: preflight, measure, select, validate, time, report (SPEC section 3).

State lives in `events.jsonl` (append-only, fsynced); the TSVs are rebuilt from it on every
start, so a SIGKILL between an event and its TSV row can neither lose nor duplicate a row.
Each model's pipeline is a generator that yields the runs it needs and receives their
outcomes; on resume the runs already finished are replayed from the events (never rerun),
so the decisions are the same as an uninterrupted campaign's. See docs/campaign.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Generator
from datetime import datetime, timezone
from pathlib import Path

from harness import capacity as cap
from harness.errors import BadInput, CampaignStopped, Findings
from harness.events import EVENTS, EventLog, campaign_stats, read_events
from harness.gpuhours import describe_estimate
from harness.health import probe
from harness.plan import (
    STAGE_OF_PURPOSE,
    STAGES,
    Cell,
    PlannedCell,
    canary_model,
    cell_dir,
    plan_cells,
)
from harness.progress import EtaEstimator, ProgressView, fmt_s, model_size
from harness.provenance import capture_provenance, redact_argv, secret_values, write_provenance
from harness.results import (
    ATTEMPT_COLUMNS,
    ATTEMPTS_TSV,
    SELECTION_COLUMNS,
    SELECTION_TSV,
    TIMING_COLUMNS,
    TIMING_TSV,
    append_row,
    write_table_atomic,
    write_text_atomic,
)
from harness.runbook import PhaseConfig, Runbook, load_runbook

DEFAULT_RUNBOOK = "runbooks/local-cpu.yaml"
POLL_S = 0.05
OK_CANARY = ("ok", "drops", "lower_bound", "does_not_fit")
BUGS = ("assert", "badflag")
TIMING_KEYS = ("dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median", "combine_ms_p90",
               "step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes",
               "dispatch_ms_p10", "combine_ms_p10", "timer", "backend_impl")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived; the campaign checkpoints and exits 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclasses.dataclass
class Request:
    """A run a pipeline asks for."""

    model: str
    backend: str
    purpose: str
    capacity: str


@dataclasses.dataclass
class Outcome:
    """A finished run as the pipelines see it (from a live run or replayed from events)."""

    cell: Cell
    status: str
    summary: dict | None
    timing: dict | None
    row: dict
    failure: dict


class Replay(Exception):
    """A stage that may not run (--stage) lacks the results it needs."""


# ---------------------------------------------------------------------------------------------
# Selection helpers: harness.selection (agreed interface) over the summary dicts in events.
# ---------------------------------------------------------------------------------------------

def _summary_obj(summary: dict):
    """A LogSummary rebuilt from its dict (events store summaries as JSON)."""
    from harness.telemetry import LogSummary
    names = {f.name for f in dataclasses.fields(LogSummary)}
    return LogSummary(**{k: v for k, v in summary.items() if k in names})


def requirement_of(summary: dict):
    from harness import selection
    return selection.requirement(_summary_obj(summary))


def validation_ok(summary: dict) -> bool:
    """Zero drops shown: rows present, none saturated, none malformed, none missing."""
    from harness import selection
    try:
        return selection.validation_verdict(_summary_obj(summary)) == "accept"
    except BadInput:
        return False


# ---------------------------------------------------------------------------------------------
# Pipelines (pure decisions; the driver runs or replays the requested cells)
# ---------------------------------------------------------------------------------------------

class Context:
    """What pipelines read: runbook, stage gates and the shared selection/timing state."""

    def __init__(self, runbook: Runbook, stages: tuple[str, ...], until: str | None):
        self.runbook = runbook
        self.stages = stages
        self.until = until
        self.selection: dict[tuple[str, str], dict] = {}
        self.timing: dict[tuple[str, str], dict] = {}
        self.skipped: set[tuple[str, str, str]] = set()
        self.dirty = False

    def stage_mode(self, stage: str) -> str:
        """'run', 'replay' (must come from earlier results) or 'stop' for a stage."""
        idx = STAGES.index(stage)
        if self.until is not None and idx > STAGES.index(self.until):
            return "stop"
        if not self.stages:
            return "run"
        if stage in self.stages:
            return "run"
        last = max(STAGES.index(s) for s in self.stages)
        return "replay" if idx < last else "stop"

    def n_of(self, model: str) -> int:
        return self.runbook.shape.uniform_tokens(self.runbook.model(model).topk)

    def set_selection(self, model: str, backend: str, row: dict) -> None:
        self.selection[(model, backend)] = row
        self.dirty = True


def selection_row(ctx: Context, model: str, backend: str, **values) -> dict:
    base = {c: None for c in SELECTION_COLUMNS}
    base.update(campaign=ctx.runbook.campaign, model=model, backend=backend,
                uniform_tokens=ctx.n_of(model))
    base.update(values)
    return base


Pipe = Generator[Request, Outcome, None]


def measure_pair(ctx: Context, model: str, backend: str) -> Generator[Request, Outcome, dict | None]:
    """Measure (re-measuring lower bounds, bounded); returns the measure outcome used."""
    rb = ctx.runbook
    n, pad = ctx.n_of(model), rb.capacity.pad_multiple
    capacity = rb.capacity.measure
    for tries in range(rb.capacity.max_remeasure + 1):
        out = yield Request(model, backend, "measure", capacity)
        if out.status != "lower_bound" or tries == rb.capacity.max_remeasure:
            return {"outcome": out, "capacity": capacity}
        from harness import selection
        req = requirement_of(out.summary)
        capacity = selection.remeasure_capacity(capacity, n, pad, req.peak)
    return None  # pragma: no cover - the loop always returns


def select_pair(ctx: Context, model: str, backend: str, measured: dict) -> dict | None:
    """Round the requirement onto the grid; None (and an empty row) when nothing to select."""
    out: Outcome = measured["outcome"]
    if out.status != "ok":          # does_not_fit, a failure, or still a lower bound
        ctx.set_selection(model, backend, selection_row(
            ctx, model, backend, measured_at_capacity=measured["capacity"], validated=False,
            validate_attempts=0))
        ctx.skipped.add((model, backend, "validate"))
        return None
    from harness import selection
    rb = ctx.runbook
    req = requirement_of(out.summary)
    sel = selection.select(req, rb.capacity.pad_multiple, rb.capacity.decimals)
    row = selection_row(ctx, model, backend, required_capacity=req.required_capacity,
                        peak_actual_valid_recv=req.peak, measured_at_capacity=measured["capacity"],
                        selected_capacity=sel.capacity, selected_budget_tokens=sel.budget,
                        over_provision=sel.over_provision, validated=False,
                        validate_attempts=0)
    ctx.set_selection(model, backend, row)
    return row


def validate_pair(ctx: Context, model: str, backend: str, row: dict) -> Pipe:
    """Validate at the selection; on drops step up one rung (bounded), recording each try."""
    rb = ctx.runbook
    n, pad = ctx.n_of(model), rb.capacity.pad_multiple
    capacity = row["selected_capacity"]
    for step in range(rb.capacity.max_validate_steps + 1):
        out = yield Request(model, backend, "validate", capacity)
        accepted = out.status == "ok" and validation_ok(out.summary)
        budget = cap.budget_tokens(capacity, n)
        row = {**row, "selected_capacity": capacity, "selected_budget_tokens": budget,
               "over_provision": (cap.over_provision(budget, row["peak_actual_valid_recv"])
                                  if row["peak_actual_valid_recv"] else None),
               "validated": accepted, "validate_attempts": step + 1}
        ctx.set_selection(model, backend, row)
        if accepted or out.status != "drops" or step == rb.capacity.max_validate_steps:
            return
        capacity = cap.step_up(capacity, n, pad, rb.capacity.decimals)


def model_pipeline(ctx: Context, model: str) -> Pipe:
    """measure -> select -> validate for each select backend, then time every time backend."""
    rb = ctx.runbook
    for b in (b for b in rb.backends if b.select):
        if ctx.stage_mode("measure") == "stop":
            return
        measured = yield from measure_pair(ctx, model, b.name)
        if ctx.stage_mode("select") == "stop":
            continue
        row = select_pair(ctx, model, b.name, measured)
        if row is None or ctx.stage_mode("validate") == "stop":
            continue
        yield from validate_pair(ctx, model, b.name, row)
    if ctx.stage_mode("time") == "stop":
        return
    yield from time_model(ctx, model)


def time_model(ctx: Context, model: str) -> Pipe:
    """Every time=true backend at max(selected capacity) over the select backends."""
    from harness import selection
    rb = ctx.runbook
    chosen = {b.name: ctx.selection[(model, b.name)]["selected_capacity"]
              for b in rb.backends
              if b.select and ctx.selection.get((model, b.name), {}).get("selected_capacity")}
    if not chosen:
        for b in rb.backends:
            if b.time:
                ctx.skipped.add((model, b.name, "time"))
        return
    tcap = selection.timing_capacity(chosen)
    for b in rb.backends:
        if b.select and (model, b.name) in ctx.selection:
            ctx.set_selection(model, b.name, {**ctx.selection[(model, b.name)],
                                              "timing_capacity": tcap})
    for b in (b for b in rb.backends if b.time):
        out = yield Request(model, b.name, "time", tcap)
        ctx.timing[(model, b.name)] = timing_row(ctx, out)
        ctx.dirty = True


def timing_row(ctx: Context, out: Outcome) -> dict:
    """A timing.tsv row; figures only from the run's [EPCAP_TIMING] line, else empty."""
    cell = out.cell
    row = {c: None for c in TIMING_COLUMNS}
    row.update(campaign=cell.campaign, model=cell.model, backend=cell.backend,
               timing_capacity=cell.capacity,
               budget_tokens=cap.budget_tokens(cell.capacity, ctx.n_of(cell.model)),
               status=out.status, cell_dir=out.row.get("cell_dir"))
    if out.timing and out.status in ("ok", "drops"):
        row.update(trials=out.timing.get("trials"), iters=out.timing.get("iters"))
        row.update({k: out.timing.get(k) for k in TIMING_KEYS})
    return row


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Active:
    """A cell in flight."""

    pipe: object
    request: Request
    cell: Cell
    handle: object
    backend: object
    spec: object
    started_utc: str
    t0: float
    infra_left: int


class Campaign:
    """Runs (or replays) the pipelines of one campaign directory."""

    def __init__(self, runbook: Runbook, root: Path, launcher, ctx: Context,
                 view: ProgressView, command_line: list[str]) -> None:
        self.rb = runbook
        self.root = root
        self.launcher = launcher
        self.ctx = ctx
        self.view = view
        self.command_line = command_line
        self.log = EventLog(root / EVENTS)
        self.events = read_events(root / EVENTS)
        self.finished: dict[tuple, list[dict]] = {}
        self.cursor: dict[tuple, int] = {}
        self.attempts: dict[tuple, int] = {}
        self.done_runs = 0
        self.estimator = EtaEstimator({m.name: model_size(m) for m in runbook.models},
                                      iterations_per_purpose(runbook))
        self.backends: dict[str, object] = {}
        self.provenance: dict[str, str] = {}
        self.active: list[Active] = []
        self._index_events()

    # -- state from events ---------------------------------------------------------------
    def _index_events(self) -> None:
        for ev in self.events:
            if ev["ev"] in ("cell_submit", "cell_start", "cell_finish"):
                key = (ev["model"], ev["backend"], ev["purpose"])
                self.attempts[key] = max(self.attempts.get(key, 0), int(ev["attempt"]))
            if ev["ev"] == "cell_finish" and not rerun_on_resume(ev):
                key = (ev["model"], ev["backend"], ev["purpose"])
                self.finished.setdefault(key, []).append(ev)
                self.done_runs += 1
                if ev.get("span_s"):
                    self.estimator.add(ev["backend"], ev["model"], ev["purpose"], ev["span_s"])
        for runs in self.finished.values():
            runs.sort(key=lambda e: int(e["attempt"]))

    def unfinished_starts(self) -> list[dict]:
        """Cells submitted by an earlier driver that never finished nor were abandoned."""
        events = read_events(self.root / EVENTS)
        closed = {e["cell"] for e in events if e["ev"] in ("cell_finish", "cell_abandoned")}
        seen, out = set(), []
        for ev in events:
            if ev["ev"] in ("cell_submit", "cell_start") and ev["cell"] not in closed:
                if ev["cell"] in seen:
                    out = [e for e in out if e["cell"] != ev["cell"]]
                seen.add(ev["cell"])
                out.append(ev)
        return out

    def reap_stale(self) -> None:
        """Kill still-running process groups of cells an earlier driver left behind."""
        from harness.launch import make_launcher
        from harness.launch.base import JobHandle
        for ev in self.unfinished_starts():
            handle = None
            if ev.get("job_id"):
                handle = JobHandle(ev["cell"], Path(ev["cell_dir"]), ev["job_id"],
                                   ev.get("job_extra") or {})
            launcher = self.launcher
            if ev.get("launcher") and ev["launcher"] != getattr(self.launcher, "name", None):
                launcher = make_launcher(ev["launcher"], self.rb)
            if handle is None:
                handle = launcher.find_existing(ev["cell"], Path(ev["cell_dir"]))
            if handle is not None:
                launcher.cancel(handle)
            self.log.append("cell_abandoned", cell=ev["cell"], reason="driver stopped mid-run; "
                            "rerun as a new attempt")

    # -- replay and run ------------------------------------------------------------------
    def replayed(self, req: Request) -> Outcome | None:
        """The next finished run for this request's key, if the events hold one."""
        key = (req.model, req.backend, req.purpose)
        runs = self.finished.get(key, [])
        idx = self.cursor.get(key, 0)
        if idx >= len(runs):
            return None
        ev = runs[idx]
        self.cursor[key] = idx + 1
        if cap.format_capacity(ev["capacity"]) != cap.format_capacity(req.capacity):
            raise BadInput(f"results in {self.root} disagree with the runbook: {ev['cell']} ran "
                           f"at capacity {ev['capacity']}, the plan now asks {req.capacity}; "
                           "use --fresh", path=str(self.rb.path), field="capacity")
        return outcome_of(ev)

    def backend(self, name: str):
        if name not in self.backends:
            from backends import load_backend
            self.backends[name] = load_backend(self.rb.backend(name))
        return self.backends[name]

    def next_cell(self, req: Request) -> Cell:
        key = (req.model, req.backend, req.purpose)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return Cell(self.rb.campaign, req.model, req.backend, req.purpose,
                    cap.format_capacity(req.capacity), self.attempts[key])

    def launch(self, pipe, req: Request, infra_left: int) -> Active:
        """Check, write cell.json + provenance, submit, record the pids."""
        from backends.base import RunRequest
        t0 = time.monotonic()
        cell = self.next_cell(req)
        n = self.ctx.n_of(req.model)
        cap.check_executable(cell.capacity, n, self.rb.capacity.pad_multiple)
        cdir = cell_dir(self.root, cell)
        cdir.mkdir(parents=True, exist_ok=True)
        backend = self.backend(req.backend)
        rb = canary_runbook(self.rb) if req.purpose == "canary" else self.rb
        try:
            spec = backend.command(RunRequest.for_cell(rb, cell, cdir))
        except ValueError as exc:
            raise BadInput(f"backend {req.backend!r} cannot build its command: {exc}",
                           path=str(self.rb.path), field="backends") from exc
        write_cell_json(cdir, cell, spec, status="running")
        self.write_cell_provenance(cdir, cell, spec)
        self.log.append("cell_submit", **cell_fields(cell), cell_dir=str(cdir),
                        launcher=self.launcher.name)
        handle = self.launcher.submit(cell.name, spec, cdir, self.rb.limits.run_timeout_s)
        self.log.append("cell_start", **cell_fields(cell), cell_dir=str(cdir),
                        launcher=self.launcher.name, job_id=handle.job_id,
                        job_extra=_jsonable(handle.extra))
        return Active(pipe, req, cell, handle, backend, spec, utc_now(), t0, infra_left)

    def write_cell_provenance(self, cdir: Path, cell: Cell, spec) -> None:
        fields = dict(self.provenance)
        fields.update({"cell": cell.name, "cell.env_keys": " ".join(sorted(spec.env)),
                       "cell.started_utc": utc_now()})
        fields["cell.argv"] = shlex.join(redacted(spec.argv))
        write_provenance(cdir / "provenance.txt", fields)

    def finish(self, act: Active, result) -> Outcome:
        """Classify, summarize, record (cell.json, event, TSV row) and feed the ETA."""
        out = analyse(self.rb, act, result, self.ctx.n_of(act.cell.model))
        span = time.monotonic() - act.t0
        self.estimator.add(act.cell.backend, act.cell.model, act.cell.purpose, span)
        self.done_runs += 1
        write_cell_json(cell_dir(self.root, act.cell), act.cell, act.spec, status=out.status,
                        summary=out.summary, timing=out.timing, failure=out.failure,
                        launcher={"state": result.state, "exit_code": result.exit_code,
                                  "detail": result.detail, "wall_s": result.wall_s})
        left = self.runs_left(exclude=act.cell)
        eta = self.eta(left)
        self.log.append("cell_finish", **cell_fields(act.cell), status=out.status,
                        row=out.row, summary=out.summary, timing=out.timing,
                        failure=out.failure, wall_s=result.wall_s, span_s=round(span, 3),
                        runs_left=len(left), eta_s=None if eta is None else round(eta, 3),
                        stage=STAGE_OF_PURPOSE[act.cell.purpose])
        if act.cell.purpose != "canary":
            append_row(self.root / ATTEMPTS_TSV, ATTEMPT_COLUMNS, out.row)
        key = (act.cell.model, act.cell.backend, act.cell.purpose)
        ev = {"row": out.row, "status": out.status}
        self.finished.setdefault(key, []).append(ev)
        self.cursor[key] = len(self.finished[key])
        self.report_cell(out, len(left), eta)
        return out

    # -- progress ------------------------------------------------------------------------
    def planned_keys(self) -> list[PlannedCell]:
        return [p for p in plan_cells(self.rb) if self.ctx.stage_mode(p.stage) == "run"]

    def runs_left(self, exclude: Cell | None = None) -> list[tuple[str, str, str]]:
        """(backend, model, purpose) of the planned runs not yet finished or skipped."""
        out = []
        for p in self.planned_keys():
            key = (p.model, p.backend, p.purpose)
            if key in self.finished or key in self.ctx.skipped:
                continue
            if exclude is not None and key == (exclude.model, exclude.backend, exclude.purpose):
                continue
            out.append((p.backend, p.model, p.purpose))
        return out

    def eta(self, left: list[tuple[str, str, str]]) -> float | None:
        eta = self.estimator.eta(left, self.rb.max_parallel_cells)
        if eta is None:
            return None
        for act in self.active:
            pred = self.estimator.predict(act.cell.backend, act.cell.model, act.cell.purpose)
            if pred is not None:
                eta += max(0.0, pred - (time.monotonic() - act.t0))
        return eta

    def report_cell(self, out: Outcome, left: int, eta: float | None) -> None:
        row = out.row
        extra = f"  {out.failure.get('line')}" if out.failure.get("line") else ""
        self.view.line(f"  {out.cell.name}: {out.status} ({row.get('wall_s')} s); "
                       f"{left} runs left, ETA {fmt_s(eta)}{extra}")
        total = self.done_runs + left
        stage = STAGE_OF_PURPOSE[out.cell.purpose]
        stage_all = [p for p in self.planned_keys() if p.stage == stage]
        stage_done = sum(1 for p in stage_all
                         if (p.model, p.backend, p.purpose) in self.finished)
        self.view.update(self.done_runs, total, stage, stage_done, len(stage_all), eta,
                         out.cell.name)

    # -- tables --------------------------------------------------------------------------
    def write_tables(self, derived: bool = True) -> None:
        """Rebuild the attempts TSV from the events (and the others from pipeline state)."""
        events = read_events(self.root / EVENTS)
        rows = [e["row"] for e in events if e["ev"] == "cell_finish"
                and e.get("purpose") != "canary"]
        write_table_atomic(self.root / ATTEMPTS_TSV, ATTEMPT_COLUMNS, rows)
        if derived:
            self.write_derived()

    def write_derived(self) -> None:
        write_table_atomic(self.root / SELECTION_TSV, SELECTION_COLUMNS,
                           [self.ctx.selection[k] for k in self.ordered(self.ctx.selection)])
        write_table_atomic(self.root / TIMING_TSV, TIMING_COLUMNS,
                           [self.ctx.timing[k] for k in self.ordered(self.ctx.timing)])
        self.ctx.dirty = False

    def ordered(self, table: dict) -> list[tuple[str, str]]:
        order = {(m.name, b.name): (i, j) for i, m in enumerate(self.rb.models)
                 for j, b in enumerate(self.rb.backends)}
        return sorted(table, key=lambda k: order.get(k, (999, 999)))

    # -- the loop ------------------------------------------------------------------------
    def run_pipelines(self, pipes: list) -> None:
        """Advance every pipeline: replay finished runs, start new ones, poll the launcher."""
        waiting: dict[int, tuple[object, Request, int]] = {}
        for pipe in pipes:
            self.advance(pipe, None, waiting, first=True)
        while waiting or self.active:
            for pid, (pipe, req, infra_left) in list(waiting.items()):
                if len(self.active) >= self.rb.max_parallel_cells:
                    break
                del waiting[pid]
                self.active.append(self.launch(pipe, req, infra_left))
            if self.ctx.dirty:
                self.write_derived()
            self.poll_once(waiting)
        if self.ctx.dirty:
            self.write_derived()

    def advance(self, pipe, outcome: Outcome | None, waiting: dict, first: bool = False) -> None:
        """Send `outcome` in; replay from events until the pipeline needs a new run."""
        while True:
            try:
                req = next(pipe) if first else pipe.send(outcome)
            except StopIteration:
                return
            first = False
            outcome, infra_left = self.replay_with_retries(req)
            if outcome is None:
                if self.ctx.stage_mode(STAGE_OF_PURPOSE[req.purpose]) != "run":
                    raise Replay(f"{req.model}/{req.backend}: no {req.purpose} results yet "
                                 f"(stage {STAGE_OF_PURPOSE[req.purpose]} not selected); run "
                                 "that stage first")
                waiting[id(pipe)] = (pipe, req, infra_left)
                return
            self.check_bug(outcome)

    def replay_with_retries(self, req: Request) -> tuple[Outcome | None, int]:
        """Replay finished runs of `req`, skipping infra failures that were retried.

        Returns the outcome the pipeline sees (None: a new run is needed) and the infra
        retries still allowed for that new run.
        """
        left = self.rb.limits.infra_retries
        outcome = self.replayed(req)
        while outcome is not None and outcome.status == "infra" and left > 0:
            nxt = self.replayed(req)
            left -= 1
            if nxt is None:
                return None, left
            outcome = nxt
        return outcome, left

    def poll_once(self, waiting: dict) -> None:
        time.sleep(POLL_S)
        for act in list(self.active):
            result = self.launcher.poll(act.handle)
            if result is None:
                continue
            self.active.remove(act)
            out = self.finish(act, result)
            self.check_bug(out)
            if out.status == "infra" and act.infra_left > 0:
                self.active.append(self.launch(act.pipe, act.request, act.infra_left - 1))
                continue
            if act.pipe is not None:
                self.advance(act.pipe, out, waiting)

    def check_bug(self, out: Outcome) -> None:
        """assert / badflag stop the campaign (exit 3) naming the cell, log and line."""
        if out.status not in BUGS:
            return
        fail = out.failure or {}
        msg = (f"campaign stopped: {out.status} in cell {out.cell.name}; log {fail.get('path')}"
               f":{fail.get('line_no')}: {fail.get('line')}")
        self.cancel_active("bug-class failure")
        self.log.append("campaign_stopped", cell=out.cell.name, status=out.status,
                        log=fail.get("path"), line_no=fail.get("line_no"),
                        line=fail.get("line"), stage=STAGE_OF_PURPOSE[out.cell.purpose])
        write_text_atomic(self.root / "STOPPED.txt", msg + "\n")
        raise CampaignStopped(msg)

    def cancel_active(self, reason: str) -> None:
        for act in list(self.active):
            self.launcher.cancel(act.handle)
            self.log.append("cell_abandoned", cell=act.cell.name, reason=reason)
        self.active.clear()

    def check_replay_inputs(self) -> None:
        """--stage: refuse up front when a stage that may not run lacks its results."""
        if not self.ctx.stages:
            return
        for p in plan_cells(self.rb):
            mode = self.ctx.stage_mode(p.stage)
            key = (p.model, p.backend, p.purpose)
            if mode == "replay" and p.purpose in ("canary", "measure") and key not in self.finished:
                raise BadInput(f"stage {p.stage} has no results for {p.model}/{p.backend} in "
                               f"{self.root}; run it first (e.g. --until {p.stage})",
                               field="--stage")

    # -- preflight -----------------------------------------------------------------------
    def run_canaries(self) -> None:
        """One tiny run per backend; any failure other than does_not_fit stops here."""
        mode = self.ctx.stage_mode("preflight")
        if mode == "stop":
            return
        model = canary_model(self.rb)
        for b in self.rb.backends:
            req = Request(model, b.name, "canary", self.rb.capacity.measure)
            out, infra_left = self.replay_with_retries(req)
            if out is None and mode != "run":
                raise Replay(f"no canary results for {b.name}; run the preflight stage first")
            while out is None or (out.status == "infra" and infra_left > 0):
                if out is not None:
                    infra_left -= 1
                act = self.launch(None, req, 0)
                self.active.append(act)
                out = self.wait(act)
            self.check_bug(out)
            if out.status not in OK_CANARY:
                fail = out.failure or {}
                self.log.append("campaign_stopped", cell=out.cell.name, status=out.status,
                                stage="preflight", log=fail.get("path"),
                                line=fail.get("line"))
                raise Findings(f"preflight: canary {out.cell.name} ended {out.status} "
                               f"({fail.get('reason', '')}); log "
                               f"{cell_dir(self.root, out.cell)}; nothing else was run")

    def wait(self, act: Active) -> Outcome:
        while True:
            time.sleep(POLL_S)
            result = self.launcher.poll(act.handle)
            if result is not None:
                self.active.remove(act)
                return self.finish(act, result)


# ---------------------------------------------------------------------------------------------
# One run's analysis
# ---------------------------------------------------------------------------------------------

def analyse(rb: Runbook, act: Active, result, n: int) -> Outcome:
    """Telemetry summary + taxonomy + timing line -> status and the attempts row."""
    from harness.taxonomy import classify_logs, iter_log_lines
    from harness.telemetry import summarize
    cell, backend = act.cell, act.backend
    logs = [p for p in (result.log_paths or sorted(cell_dir_of(act).glob("rank*.log")))
            if Path(p).is_file()]
    summary = summarize(logs, tags=backend.telemetry_tags(), **expectations(rb, cell, backend)
                        ) if logs else None
    rows = summary.rows if summary else 0
    verdict = classify_logs(result.exit_code, result.state, logs, backend.failure_patterns(),
                            rows)
    failure = verdict.to_dict()
    status = verdict.status
    timing = None
    if status is None:
        saturated = summary.saturated_rows > 0
        status = ("lower_bound" if cell.purpose == "measure" else "drops") if saturated else "ok"
    if cell.purpose == "time" and status in ("ok", "drops"):
        timing = backend.parse_timing(t for _, _, t in iter_log_lines(logs))
        if timing is None:
            status = "crash"
            failure.update(status="crash", reason="no [EPCAP_TIMING] line in the logs")
    sdict = summary.to_dict() if summary else None
    row = attempt_row(rb, act, result, summary, status, failure, timing, n)
    return Outcome(cell, status, sdict, timing, row, failure)


def expectations(rb: Runbook, cell: Cell, backend) -> dict:
    """Ranks x layers x iterations a complete log holds (reference backends only).

    The reference worker logs every rank, MoE layer and iteration (warmup included; a timed
    run logs warmup + iters x trials). Cluster adapters' iteration numbering is theirs, so
    their completeness is judged from the rows seen.
    """
    if backend.config.kind != "reference":
        return {}
    run_rb = canary_runbook(rb) if cell.purpose == "canary" else rb
    phase = run_rb.timing if cell.purpose == "time" else run_rb.measure
    iters = phase.warmup + phase.iters * (phase.trials if cell.purpose == "time" else 1)
    return {"expected_ranks": rb.shape.ep, "expected_layers": rb.model(cell.model).moe_layers,
            "expected_iters": iters}


def cell_dir_of(act: Active) -> Path:
    return Path(act.handle.cell_dir)


def attempt_row(rb: Runbook, act: Active, result, summary, status: str, failure: dict,
                timing: dict | None, n: int) -> dict:
    cell = act.cell
    impl = (timing or {}).get("backend_impl") or act.backend.config.kind
    measured = summary is not None and summary.rows > 0 and status not in (
        "does_not_fit", "assert", "badflag", "crash", "timeout", "infra")
    return {
        "campaign": cell.campaign, "model": cell.model, "backend": cell.backend,
        "purpose": cell.purpose, "attempt": cell.attempt, "capacity": cell.capacity,
        "capacity_tag": cap.capacity_tag(cell.capacity), "uniform_tokens": n,
        "budget_tokens": cap.budget_tokens(cell.capacity, n), "status": status,
        "rows": summary.rows if summary else 0,
        "malformed_rows": summary.malformed_rows if summary else 0,
        "saturated_rows": summary.saturated_rows if summary else 0,
        "peak_actual_valid_recv": summary.peak_actual_valid_recv if measured else None,
        "required_capacity": summary.required_capacity if measured else None,
        "cell_dir": f"cells/{cell.name}", "started_utc": act.started_utc,
        "finished_utc": utc_now(), "wall_s": result.wall_s,
        "backend_impl": "reference" if impl == "reference" else "cluster",
        "exit_code": result.exit_code,
        "failure_line": failure.get("line") if failure.get("status") else None,
    }


def iterations_per_purpose(rb: Runbook) -> dict[str, int]:
    """Iterations one run of each purpose class does (the ETA's prior for unseen ones)."""
    can = canary_runbook(rb).measure
    return {"canary": can.warmup + can.iters, "select": rb.measure.warmup + rb.measure.iters,
            "time": rb.timing.warmup + rb.timing.iters * rb.timing.trials}


def rerun_on_resume(ev: dict) -> bool:
    """Runs that stopped the campaign (a bug, a failed canary) run again after a fix."""
    return ev["status"] in BUGS or (ev["purpose"] == "canary" and ev["status"] not in OK_CANARY)


def outcome_of(ev: dict) -> Outcome:
    cell = Cell(ev["campaign"], ev["model"], ev["backend"], ev["purpose"], ev["capacity"],
                int(ev["attempt"]))
    return Outcome(cell, ev["status"], ev.get("summary"), ev.get("timing"), ev.get("row") or {},
                   ev.get("failure") or {})


def cell_fields(cell: Cell) -> dict:
    return {"cell": cell.name, "campaign": cell.campaign, "model": cell.model,
            "backend": cell.backend, "purpose": cell.purpose, "capacity": cell.capacity,
            "attempt": cell.attempt}


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def write_cell_json(cdir: Path, cell: Cell, spec, status: str, **extra) -> None:
    """cell.json: the cell, argv, env KEYS only (never values), status and results."""
    doc = {"cell": dataclasses.asdict(cell), "name": cell.name, "argv": redacted(spec.argv),
           "env_keys": sorted(spec.env), "ntasks": spec.ntasks, "nodes": spec.nodes,
           "gpus_per_node": spec.gpus_per_node, "cwd": spec.cwd, "status": status}
    doc.update(extra)
    write_text_atomic(cdir / "cell.json", json.dumps(_jsonable(doc), indent=1) + "\n")


def redacted(argv) -> list[str]:
    """argv with the values of secret-named environment variables masked."""
    return redact_argv([str(a) for a in argv], secret_values())


def canary_runbook(rb: Runbook) -> Runbook:
    """The runbook a canary runs with: one iteration, no warmup, one trial."""
    return dataclasses.replace(rb, measure=PhaseConfig(warmup=0, iters=1, trials=1),
                               timing=PhaseConfig(warmup=0, iters=1, trials=1))


# ---------------------------------------------------------------------------------------------
# Campaign directory, preflight gates, dry run
# ---------------------------------------------------------------------------------------------

def campaign_dirs(root: Path, campaign: str) -> list[Path]:
    """results/<campaign> and results/<campaign>-<N>, oldest first."""
    out = []
    base = root / campaign
    if base.is_dir():
        out.append((1, base))
    for path in root.glob(f"{campaign}-*") if root.is_dir() else []:
        suffix = path.name[len(campaign) + 1:]
        if suffix.isdigit() and path.is_dir():
            out.append((int(suffix), path))
    return [p for _, p in sorted(out)]


def choose_dir(root: Path, campaign: str, fresh: bool) -> Path:
    """The newest campaign dir (resume) or a new one (--fresh, or none yet)."""
    dirs = campaign_dirs(root, campaign)
    if dirs and not fresh:
        return dirs[-1]
    if not dirs:
        return root / campaign
    n = 2
    while (root / f"{campaign}-{n}").exists():
        n += 1
    return root / f"{campaign}-{n}"


def runbook_fingerprint(rb: Runbook) -> dict:
    """sha256 of the runbook file and its model zoo (resume refuses a changed runbook)."""
    import hashlib
    out = {"runbook_sha256": hashlib.sha256(rb.path.read_bytes()).hexdigest()}
    zoo = zoo_path(rb)
    if zoo is not None and zoo.is_file():
        out["models_sha256"] = hashlib.sha256(zoo.read_bytes()).hexdigest()
    return out


def zoo_path(rb: Runbook) -> Path | None:
    import yaml
    try:
        data = yaml.safe_load(rb.path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    return rb.path.parent / data.get("models_file", "models.yaml")


def check_fingerprint(root: Path, rb: Runbook) -> None:
    events = read_events(root / EVENTS)
    first = next((e for e in events if e["ev"] == "campaign_start"), None)
    if first is None:
        return
    now = runbook_fingerprint(rb)
    for key, value in now.items():
        if first.get(key) and first[key] != value:
            raise BadInput(f"{key.split('_')[0]} file changed since this campaign started "
                           f"in {root} (sha256 {first[key][:12]} -> {value[:12]}); rerun with "
                           "--fresh to start a new campaign directory",
                           path=str(rb.path), field=key.split("_")[0])


def check_planned_capacities(rb: Runbook) -> None:
    """Preflight gate: the measurement capacity is executable for every model's N."""
    for model in rb.models:
        n = rb.shape.uniform_tokens(model.topk)
        try:
            cap.check_executable(rb.capacity.measure, n, rb.capacity.pad_multiple)
        except BadInput as exc:
            raise BadInput(f"{model.name}: {exc}", path=str(rb.path),
                           field="capacity.measure") from exc


def health_gate(view: ProgressView, log: EventLog) -> None:
    report = probe()
    log.append("health", ok=report.ok, status=report.status, failures=list(report.failures))
    if not report.ok:
        raise Findings("preflight: health probe failed: " + "; ".join(report.failures))
    view.line(f"preflight: health {report.status}")


def capture_campaign_provenance(rb: Runbook, command_line: list[str], view: ProgressView,
                                log: EventLog) -> dict[str, str]:
    return capture_provenance(command_line, dict(rb.repositories), rb.path)


def freeze_runbook(root: Path, rb: Runbook) -> None:
    """runbook.yaml (and its zoo, when it sits next to it) copied as run."""
    write_text_atomic(root / "runbook.yaml", rb.path.read_text(encoding="utf-8"))
    zoo = zoo_path(rb)
    if zoo is not None and zoo.is_file():
        rel = os.path.relpath(zoo, rb.path.parent)
        target = (root / rel).resolve()
        if root.resolve() in target.parents:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, zoo.read_text(encoding="utf-8"))


def print_dry_run(rb: Runbook, root: Path, launcher_name: str) -> int:
    """Print every planned cell with its command, capacity, budget and paths; run nothing."""
    from backends import load_backend
    from backends.base import RunRequest
    cells = plan_cells(rb)
    print(f"campaign {rb.campaign}: runbook {rb.path}; results {root}; launcher {launcher_name}")
    print(f"shape: seq {rb.shape.seq} x micro_batch {rb.shape.micro_batch}, ep {rb.shape.ep}; "
          f"pad_multiple {rb.capacity.pad_multiple}; grid "
          f"{'exact' if rb.capacity.decimals is None else f'decimals-{rb.capacity.decimals}'}")
    backends = {b.name: load_backend(b) for b in rb.backends}
    attempts: dict[tuple, int] = {}
    for p in cells:
        key = (p.model, p.backend, p.purpose)
        attempts[key] = attempts.get(key, 0) + 1
        n = rb.shape.uniform_tokens(rb.model(p.model).topk)
        print(f"\n[{p.stage}] {p.model} {p.backend} {p.purpose}")
        if p.capacity is None:
            print("  capacity: unknown until measured (set by the select stage; timing uses "
                  "max over the select backends' selections)")
            print(f"  cells: {root}/cells/{p.model}__{p.backend}__{p.purpose}__cap<TAG>__a<N>/")
            continue
        cell = Cell(rb.campaign, p.model, p.backend, p.purpose, p.capacity, attempts[key])
        cdir = cell_dir(root, cell)
        budget = cap.budget_tokens(p.capacity, n)
        ok = cap.is_executable(p.capacity, n, rb.capacity.pad_multiple)
        run_rb = canary_runbook(rb) if p.purpose == "canary" else rb
        spec = backends[p.backend].command(RunRequest.for_cell(run_rb, cell, cdir))
        print(f"  capacity {p.capacity}: N = {n}, budget = int({p.capacity} x {n}) = {budget}, "
              f"{'executable' if ok else 'NOT executable'} (pad {rb.capacity.pad_multiple})")
        print(f"  command ({spec.ntasks} task(s), {spec.nodes} node(s)): {shlex.join(spec.argv)}")
        if spec.env:
            print(f"  env keys: {' '.join(sorted(spec.env))}")
        print(f"  logs: {cdir}/rank<R>.log; provenance: {cdir}/provenance.txt")
    print(f"\nplanned runs: {len(cells)} (re-measures and validation step-ups add runs)")
    print(gpu_hours_line(rb, len(cells)))
    return 0


def gpu_hours_line(rb: Runbook, n_cells: int) -> str:
    return describe_estimate(rb, n_cells)


# ---------------------------------------------------------------------------------------------
# CLI entry points
# ---------------------------------------------------------------------------------------------

def _install_signals() -> dict:
    def handler(signum, _frame):
        raise Interrupted(signum)
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, handler)
    return old


def _restore_signals(old: dict) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)


def default_runbook() -> Path:
    """runbooks/local-cpu.yaml here, else the one shipped next to the harness package."""
    here = Path(DEFAULT_RUNBOOK)
    return here if here.is_file() else Path(__file__).resolve().parents[1] / DEFAULT_RUNBOOK


def cli_run(runbook: str | None = None, results: str | None = None,
            launcher: str | None = None, dry_run: bool = False, fresh: bool = False,
            stages: tuple[str, ...] = (), until: str | None = None) -> int:
    """`epcap run`: load and check the runbook, then run or resume the campaign."""
    rb = load_runbook(runbook or default_runbook())
    check_planned_capacities(rb)
    launcher_name = launcher or rb.launcher
    root_dir = Path(results or "results")
    stages = tuple(stages or ())
    if until is not None and stages:
        raise BadInput("use --stage or --until, not both", field="--until")
    if dry_run:
        target = choose_dir(root_dir, rb.campaign, fresh)
        return print_dry_run(rb, target, launcher_name)
    from harness.launch import make_launcher
    launch = make_launcher(launcher_name, rb)
    root = choose_dir(root_dir, rb.campaign, fresh)
    if root.exists():
        check_fingerprint(root, rb)
    command_line = ["epcap", *sys.argv[1:]]
    old = _install_signals()
    try:
        return run_campaign(rb, root, launch, stages, until, command_line)
    finally:
        _restore_signals(old)


def run_campaign(rb: Runbook, root: Path, launch, stages: tuple[str, ...], until: str | None,
                 command_line: list[str]) -> int:
    """Create or resume `root` and drive the pipelines to the end (or the stop stage)."""
    view = ProgressView()
    new = not (root / EVENTS).exists()
    ctx = Context(rb, stages, until)
    camp = Campaign(rb, root, launch, ctx, view, command_line)
    camp.check_replay_inputs()                      # before anything is written
    root.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    if new:
        freeze_runbook(root, rb)
        camp.log.append("campaign_start", campaign=rb.campaign, runbook=str(rb.path),
                        **runbook_fingerprint(rb), command_line=command_line,
                        launcher=launch.name, stage="preflight")
    try:
        camp.log.append("run_start", resume=not new, command_line=command_line,
                        stages=list(stages), until=until)
        camp.reap_stale()
        camp.write_tables(derived=False)
        return drive(camp, rb, root, view, new, t_start)
    except Interrupted as exc:
        for sig in (signal.SIGINT, signal.SIGTERM):     # a second signal must not cut cleanup
            signal.signal(sig, signal.SIG_IGN)
        camp.cancel_active(f"interrupted by {exc}")
        camp.reap_stale()                   # a cell caught between submit and its record
        camp.log.append("checkpoint", reason=str(exc), runs_done=camp.done_runs)
        camp.write_tables()
        view.stop()
        view.line(f"interrupted ({exc}); checkpoint written; rerun the same command to resume")
        return 128 + exc.signum
    except Replay as exc:
        view.stop()
        raise BadInput(str(exc), field="--stage") from exc
    finally:
        view.stop()


def drive(camp: Campaign, rb: Runbook, root: Path, view: ProgressView, new: bool,
          t_start: float) -> int:
    """Preflight gates, canaries, the pipelines, the report; prints the banners."""
    if camp.ctx.stage_mode("preflight") == "run":
        health_gate(view, camp.log)
    camp.provenance = capture_campaign_provenance(rb, camp.command_line, view, camp.log)
    if new or not (root / "provenance.txt").exists():
        write_provenance(root / "provenance.txt", camp.provenance)
    left = camp.runs_left()
    eta = camp.eta(left)
    word = "resuming" if not new else "starting"
    view.line(f"epcap: {word} campaign {rb.campaign} in {root}: {camp.done_runs} runs done, "
              f"{len(left)} runs left (at least), ETA {fmt_s(eta)}")
    view.start(camp.done_runs, camp.done_runs + len(left))
    camp.run_canaries()
    camp.run_pipelines([model_pipeline(camp.ctx, m.name) for m in rb.models])
    camp.write_tables()
    finished = camp.ctx.until is None and not camp.ctx.stages
    # The end of the runs is logged before the report so the report can show the ETA error.
    camp.log.append("campaign_done" if finished else "stage_done", runs_done=camp.done_runs,
                    stage="done" if finished else (camp.ctx.until or camp.ctx.stages[-1]),
                    runs_left=0)
    if camp.ctx.stage_mode("report") == "run":
        build_report(root, view, camp.log)
    view.stop()
    print_summary(root, view, time.monotonic() - t_start)
    return 0


def build_report(root: Path, view: ProgressView, log: EventLog) -> None:
    from harness.report import build_report as build  # lazy: matplotlib is slow to import
    out = build(root)
    log.append("report", path=str(out))
    view.line(f"report: {out}")


def print_summary(root: Path, view: ProgressView, this_run_s: float) -> None:
    stats = campaign_stats(root)
    err = stats.get("eta_error")
    view.line(f"done: {stats['runs_done']} runs; wall span {fmt_s(stats['wall_span_s'])} "
              f"(this invocation {fmt_s(this_run_s)}), busy {fmt_s(stats['busy_s'])}; "
              f"ETA error (estimated/actual) {err if err is not None else 'n/a'}"
              f"; at 25/50/75% {stats['eta_error_at']}")
    if stats["failures_by_class"]:
        view.line(f"failures by class: {stats['failures_by_class']}")
    view.line(f"results: {root}")


def cli_status(results_dir: str) -> int:
    """`epcap status`: stage, runs done / left, failures by class, ETA."""
    root = Path(results_dir)
    if not (root / EVENTS).is_file():
        raise BadInput("not a campaign directory (no events.jsonl)", path=str(root))
    stats = campaign_stats(root)
    print(f"campaign: {root}")
    print(f"stage: {stats['stage']}")
    left = stats["runs_left"]
    print(f"runs: {stats['runs_done']} done, {left if left is not None else 'unknown'} left")
    print(f"failures by class: {stats['failures_by_class'] or 'none'}")
    print(f"ETA: {fmt_s(stats['eta_s']) if stats['eta_s'] is not None else 'unknown'}")
    print(f"wall span {fmt_s(stats['wall_span_s'])}, busy {fmt_s(stats['busy_s'])}")
    if stats["stopped"]:
        s = stats["stopped"]
        print(f"stopped: {s.get('status')} in {s.get('cell')} ({s.get('log')}:"
              f"{s.get('line_no')}: {s.get('line')})")
    return 0
