"""The driver: schedules the model pipelines, launches and finishes cells, retries infra
failures (bounded), stops on a bug, and replays finished runs from the events on resume."""

from __future__ import annotations

import dataclasses
import errno
import shlex
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from harness.api.backend import Backend, LaunchSpec, RunRequest
from harness.api.launcher import JobHandle, JobResult, Launcher, QueueWait
from harness.api.registry import load_backend
from harness.campaign import store
from harness.campaign.estimate import CostModel
from harness.campaign.progress import EtaEstimator, ProgressView, fmt_s, model_size
from harness.errors import BadInput, CampaignStopped, EpcapError, Findings, what_broke
from harness.grid import capacity as cap
from harness.io.atomic import write_text_atomic
from harness.io.boundary.paths import check_under
from harness.io.redact import redact_text
from harness.launch import make_launcher
from harness.pipeline.analysis import analyse, attempt_row, utc_now
from harness.pipeline.decisions import Context, Outcome, Pipe, Request
from harness.pipeline.replay import next_standing
from harness.pipeline.stages import STAGE_OF_PURPOSE, plan_cells
from harness.results.events import (
    CellAbandoned,
    CellFinish,
    CellQueued,
    CellRef,
    CellsInvalidated,
    CellStart,
    CellSubmit,
    EventLog,
    Stopped,
    parse_event,
    read_events,
    superseded_infra,
)
from harness.results.layout import (
    ATTEMPTS_TSV,
    EVENTS_JSONL,
    HARNESS_TXT,
    PROVENANCE_TXT,
    STOPPED_TXT,
    Cell,
    PlannedCell,
    canary_model,
    cell_dir,
)
from harness.results.provenance import write_provenance
from harness.results.retries import RetryBudget
from harness.results.rows import ATTEMPT_COLUMNS
from harness.results.tables import append_row
from harness.runbook.model import Runbook
from harness.taxonomy.judge import CONFIG_FAILURE
from harness.timing import verdicts
from harness.vocab import BUG_CLASSES, CANARY_OK, LauncherState, Purpose, Stage, StageMode, Status

POLL_S = 0.05           # between polls, unless the launcher says otherwise (Launcher.poll_s)
# The derived tables (selection, timing, comparison, trials, frontier) are rewritten at most
# this often while runs go on, and always when the loop ends (done, stopped or interrupted):
# each rewrite is an fsynced new file, ~5 ms, and the CPU campaign finishes a run every
# 0.6 s; a cluster run takes minutes, so there every finished run is still written at once.
# Tables a killed driver left behind are rebuilt from the events on resume.
DERIVED_EVERY_S = 5.0
# A harness failure (docs/taxonomy.md#harness-failures) is retried as a new attempt without
# spending the cell's retries; this many in a row for one request, and the next stops the
# campaign naming the traceback.
HARNESS_RETRIES = 2


# Stages whose cells interleave within one model (a backend's measure, then its validation
# steps, then the next backend's): one allocation group (slurm.allocation: per-stage).
CAPACITY_GROUP = "capacity"
INTERLEAVED = frozenset({Stage.MEASURE, Stage.SELECT, Stage.VALIDATE})


def group_name(stage: str, model: str) -> str:
    """`<stage>.<model>`, the interleaved capacity stages as one (CAPACITY_GROUP)."""
    return f"{CAPACITY_GROUP if stage in INTERLEAVED else stage}.{model}"


class Replay(Exception):
    """A stage that may not run (--stage) lacks the results it needs."""


@dataclasses.dataclass
class Active:
    """A cell in flight."""

    pipe: Pipe | None
    request: Request
    cell: Cell
    handle: JobHandle
    backend: Backend
    spec: LaunchSpec
    started_utc: str
    t0: float
    retries_left: RetryBudget
    adopted: bool = False             # a job an earlier driver submitted (its span is not ours)
    queued: str | None = None         # the scheduler's pending reason last said, if queued
    result: JobResult | None = None   # known before any poll: the harness failed to start it


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)   # the user's to fix: named, not retried


def disk_error(exc: BaseException) -> bool:
    """A full or read-only disk: harness.cli names it (exit 2); retrying cannot help."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def harness_result(exc: BaseException, doing: str, wall_s: float | None = None) -> JobResult:
    """The JobResult of a cell the harness failed (`doing`: what it was doing), not its run."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    detail = getattr(exc, "detail", "")     # e.g. the dead fork server's own stderr
    if detail:
        trace += f"\n{type(exc).__name__}.detail (its own output):\n{detail}"
    return JobResult(LauncherState.FAILED, None, [], wall_s, "harness failure",
                     harness=f"{doing}: {what_broke(exc)}", harness_trace=trace)


@dataclasses.dataclass(frozen=True)
class Orphan:
    """A job an earlier driver submitted that no event closed: adopted when the plan asks
    for its (model, backend, purpose) again, cancelled when the plan no longer does."""

    event: CellSubmit
    handle: JobHandle
    launcher: Launcher


class Campaign:
    """Runs (or replays) the pipelines of one campaign directory."""

    def __init__(self, runbook: Runbook, root: Path, launcher: Launcher, ctx: Context,
                 view: ProgressView, command_line: list[str],
                 history_roots: tuple[Path, ...] = (), writable: bool = True) -> None:
        self.rb = runbook
        self.root = root
        self.on_publish: Callable[[str], None] | None = None   # live publishing's hook
        self.published_stages: set[str] = set()
        self.launcher = launcher
        self.ctx = ctx
        self.view = view
        self.command_line = command_line
        self.log = EventLog(root / EVENTS_JSONL) if writable else None  # dry run: reads only
        self.finished: dict[tuple, list[CellFinish]] = {}
        self.cursor: dict[tuple, int] = {}
        self.rungs_used: dict[tuple, set[int]] = {}   # frontier runs replayed, by index
        self.attempts: dict[tuple, int] = {}
        self.cost = CostModel.of(runbook)       # the prior where no history teaches
        self.estimator = EtaEstimator({m.name: model_size(m) for m in runbook.models},
                                      store.iterations_per_purpose(runbook),
                                      self.cost.prior if self.cost is not None else None)
        self.backends: dict[str, Backend] = {}
        self.provenance: dict[str, str] = {}
        self.active: list[Active] = []
        self.invocation: dict[str, str] = {}     # provenance lines of a partial re-run
        self.orphans: dict[tuple[str, str, str], Orphan] = {}
        self.harness_fails: dict[tuple[str, str, str], int] = {}   # in a row, per request
        self.open_groups: set[str] = set()      # groups (model stages) with cells launched
        past = store.history(root, runbook, history_roots)
        for backend, model, purpose, attempt, seconds in past.runs:   # older than our own
            self.estimator.add_history(backend, model, purpose, seconds, attempt)
        self.past = past
        self.startup_s = past.startup_s if past.runs or self.cost is None \
            else self.cost.startup_s
        self.pace = past.pace
        self.first_eta: float | None = None      # this invocation's estimate at its start
        self._index_events(read_events(root / EVENTS_JSONL, strict=True))
        self.estimator.begin_invocation()       # the drift: this invocation's load only

    # -- state from events ---------------------------------------------------------------
    def _index_events(self, events: list[dict]) -> None:
        records = [parse_event(e) for e in events]
        invalid = {c for r in records if isinstance(r, CellsInvalidated) for c in r.cells}
        for rec in records:
            if not isinstance(rec, (CellSubmit, CellFinish)):
                continue
            key = (rec.model, rec.backend, rec.purpose)
            self.attempts[key] = max(self.attempts.get(key, 0), int(rec.attempt))
            if (isinstance(rec, CellFinish) and not store.rerun_on_resume(rec)
                    and rec.cell not in invalid):
                self.finished.setdefault(key, []).append(rec)
                if rec.span_s:
                    self.estimator.add(rec.backend, rec.model, rec.purpose, rec.span_s,
                                       int(rec.attempt))
        for runs in self.finished.values():
            runs.sort(key=lambda e: int(e.attempt))

    def invalidate(self, cells: list[str], reason: str) -> None:
        """Record that these finished cells no longer count (event), and forget them: their
        requests run again as new attempts."""
        if not cells:
            return
        self.log.write(CellsInvalidated(cells=list(cells), reason=reason))
        gone = set(cells)
        for key, runs in list(self.finished.items()):
            self.finished[key] = [ev for ev in runs if ev.cell not in gone]

    @property
    def done_runs(self) -> int:
        """Finished runs whose results stand: invalidated and rerun-on-resume runs are not in
        `finished`; an infra failure a later run retried is not counted (the same rule as
        `epcap status`, harness.results.events.standing_finishes)."""
        return sum(self.standing(runs) for runs in self.finished.values())

    def standing(self, runs: list[CellFinish]) -> int:
        """How many of one key's finished runs stand (the retried infra failures left out)."""
        return len(runs) - sum(superseded_infra([r.status for r in runs],
                                                self.rb.limits.infra_retries,
                                                self.rb.limits.unclassified.retries))

    def unfinished_starts(self) -> list[CellSubmit]:
        return store.unfinished_starts(self.root)

    def reap_stale(self, adopt: bool = True) -> None:
        """Cells an earlier driver left behind: a job that outlives its driver (Slurm) is kept
        to be adopted, finished or still running, when the plan asks for that run again
        (`launch`); any other is cancelled and abandoned (rerun as a new attempt). With
        `adopt=False` (an interrupt: the user asked to stop) every one is cancelled."""
        for ev in self.unfinished_starts():
            handle = None
            if isinstance(ev, CellStart) and ev.job_id:
                handle = JobHandle(ev.cell, Path(ev.cell_dir), ev.job_id, ev.job_extra or {})
            launcher = self.launcher
            if ev.launcher and ev.launcher != self.launcher.name:
                launcher = make_launcher(ev.launcher, self.rb)
            if handle is None:
                handle = launcher.find_existing(ev.cell, Path(ev.cell_dir))
            key = (ev.model, ev.backend, ev.purpose)
            if adopt and handle is not None and launcher.adopts_orphans \
                    and key not in self.orphans:
                self.orphans[key] = Orphan(ev, handle, launcher)
                continue
            self.drop_orphan(Orphan(ev, handle, launcher) if handle else None, ev.cell,
                             Path(ev.cell_dir))
        if not adopt:
            for orphan in list(self.orphans.values()):
                self.drop_orphan(orphan, orphan.event.cell, Path(orphan.event.cell_dir))
            self.orphans.clear()

    def drop_orphan(self, orphan: Orphan | None, cell: str, cdir: Path,
                    reason: str = "driver stopped mid-run; rerun as a new attempt") -> None:
        """Cancel an earlier driver's job (when one is known) and record the cell abandoned."""
        if orphan is not None:
            orphan.launcher.cancel(orphan.handle)
        self.log.write(CellAbandoned(cell=cell, reason=reason))
        store.mark_abandoned(cdir, reason)

    def release_orphans(self) -> None:
        """The runs are over: orphans the plan never asked for again are cancelled."""
        for orphan in list(self.orphans.values()):
            self.drop_orphan(orphan, orphan.event.cell, Path(orphan.event.cell_dir),
                             "not in the plan any more (runbook edit or selection)")
        self.orphans.clear()

    def adopt(self, pipe: Pipe | None, req: Request, retries_left: RetryBudget) -> Active | None:
        """The earlier driver's job for this request, as this request's run (finished or still
        running: polled like one of ours, nothing resubmitted), else None."""
        orphan = self.orphans.pop((req.model, req.backend, req.purpose), None)
        if orphan is None:
            return None
        ev = orphan.event
        if cap.format_capacity(ev.capacity) != cap.format_capacity(req.capacity):
            self.drop_orphan(orphan, ev.cell, Path(ev.cell_dir),
                             f"ran at capacity {ev.capacity}; the plan now asks {req.capacity}")
            return None
        cell = Cell(self.rb.campaign, ev.model, ev.backend, ev.purpose,
                    cap.format_capacity(ev.capacity), int(ev.attempt))
        cdir = cell_dir(self.root, cell)
        backend = self.backend(req.backend)
        spec = backend.command(RunRequest.for_cell(self.rb, cell, cdir))
        if not isinstance(ev, CellStart):       # submitted, but its job id was never logged
            self.log.write(CellStart(**CellRef.fields_of(cell), cell_dir=str(cdir),
                                     launcher=orphan.launcher.name,
                                     job_id=orphan.handle.job_id,
                                     job_extra=store.jsonable(orphan.handle.extra)))
        self.view.line(f"  {cell.name}: adopting job {orphan.handle.job_id}, submitted by an "
                       "earlier driver (not resubmitted)")
        return Active(pipe, req, cell, orphan.handle, backend, spec, utc_now(),
                      time.monotonic(), retries_left, adopted=True)

    # -- replay and run ------------------------------------------------------------------
    def replayed(self, req: Request) -> Outcome | None:
        """The next finished run for this request's key, if the events hold one."""
        key = (req.model, req.backend, req.purpose)
        runs = self.finished.get(key, [])
        if req.purpose == Purpose.FRONTIER:
            return self.replayed_rung(key, runs, req.capacity)
        idx = self.cursor.get(key, 0)
        if idx >= len(runs):
            return None
        ev = runs[idx]
        self.cursor[key] = idx + 1
        if cap.format_capacity(ev.capacity) != cap.format_capacity(req.capacity):
            raise BadInput(f"results in {self.root} disagree with the runbook: {ev.cell} ran "
                           f"at capacity {ev.capacity}, the plan now asks {req.capacity}; "
                           "use --fresh", path=str(self.rb.path), field="capacity")
        return store.outcome_of(ev)

    def replayed_rung(self, key: tuple, runs: list[CellFinish], capacity: str
                      ) -> Outcome | None:
        """A frontier request is answered by the next unreplayed run at its capacity, not
        by position: with `frontier.rungs` raised or lowered on resume the rungs kept are
        replayed and only new rungs run (docs/frontier.md); `unasked_rungs` are the rest."""
        used = self.rungs_used.setdefault(key, set())
        for i, ev in enumerate(runs):
            if i not in used and cap.format_capacity(ev.capacity) == cap.format_capacity(
                    capacity):
                used.add(i)
                return store.outcome_of(ev)
        return None

    def unasked_rungs(self) -> list[str]:
        """Frontier runs no request of this invocation's pipelines replayed: rungs beyond a
        lowered `frontier.rungs` (or of a pair whose frontier step no longer runs)."""
        return [ev.cell for key, runs in self.finished.items() if key[2] == Purpose.FRONTIER
                for i, ev in enumerate(runs) if i not in self.rungs_used.get(key, set())]

    def backend(self, name: str) -> Backend:
        if name not in self.backends:
            self.backends[name] = load_backend(self.rb.backend(name))
        return self.backends[name]

    def next_cell(self, req: Request) -> Cell:
        key = (req.model, req.backend, req.purpose)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return Cell(self.rb.campaign, req.model, req.backend, req.purpose,
                    cap.format_capacity(req.capacity), self.attempts[key])

    def launch(self, pipe: Pipe | None, req: Request, retries_left: RetryBudget) -> Active:
        """Check, write cell.json + provenance, submit, record the pids (or adopt the job an
        earlier driver submitted for this request)."""
        group = self.group_of(req)
        self.open_groups.add(group)
        self.launcher.use_group(group, self.planned_in(group), self.root)
        adopted = self.adopt(pipe, req, retries_left)
        if adopted is not None:
            return adopted
        t0 = time.monotonic()
        cell = self.next_cell(req)
        cap.check_executable(cell.capacity, self.ctx.n_of(req.model), self.rb.capacity.pad_multiple)
        cdir = check_under(cell_dir(self.root, cell), self.root, "cell")   # never outside
        cdir.mkdir(parents=True, exist_ok=True)
        backend = self.backend(req.backend)
        try:
            spec = backend.command(RunRequest.for_cell(self.rb, cell, cdir))
        except ValueError as exc:
            raise BadInput(f"backend {req.backend!r} cannot build its command: {exc}",
                           path=str(self.rb.path), field="backends") from exc
        store.write_cell_json(cdir, cell, spec, status="running")
        self.write_cell_provenance(cdir, cell, spec)
        where = {**CellRef.fields_of(cell), "cell_dir": str(cdir),
                 "launcher": self.launcher.name}
        self.log.write(CellSubmit(**where))
        try:
            handle = self.launcher.submit(cell.name, spec, cdir, self.rb.limits.run_timeout_s)
        except EpcapError as exc:           # refused (bad partition...): never ran
            reason = f"submission refused: {exc}"
            self.log.write(CellAbandoned(cell=cell.name, reason=reason))
            store.mark_abandoned(cdir, reason)
            raise
        except Exception as exc:            # noqa: BLE001 - the harness failed (issue 41)
            if disk_error(exc):
                raise
            return Active(pipe, req, cell, JobHandle(cell.name, cdir, "", {}), backend, spec,
                          utc_now(), t0, retries_left,
                          result=harness_result(exc, f"{self.launcher.name} launcher, "
                                                "starting the cell",
                                                round(time.monotonic() - t0, 3)))
        self.log.write(CellStart(**where, job_id=handle.job_id,
                                 job_extra=store.jsonable(handle.extra)))
        return Active(pipe, req, cell, handle, backend, spec, utc_now(), t0, retries_left)

    # -- allocations (slurm.allocation: per-stage) ----------------------------------------
    @staticmethod
    def group_of(req: Request) -> str:
        """The allocation group of a request: its stage and model (`time.QWEN3_30B`); the
        measure, select and validate stages interleave per backend (a pair's measure, then
        its validation), so they are one group, `capacity`."""
        return group_name(STAGE_OF_PURPOSE[req.purpose], req.model)

    def planned_in(self, group: str) -> int:
        """Cells the plan gives `group` (its allocation's time limit is that many cells')."""
        return sum(1 for p in plan_cells(self.rb) if group_name(p.stage, p.model) == group)

    def launch_order(self, waiting: dict) -> list:
        """The waiting requests in the order to launch them: with allocations, those of a
        group already open first (a group's cells run one after another, so an allocation
        does not wait while another model's cells run); else as they came."""
        items = list(waiting.items())
        if not self.launcher.holds_allocations:
            return items
        return sorted(items, key=lambda kv: self.group_of(kv[1][1]) not in self.open_groups)

    def close_groups(self, waiting: dict | None = None) -> None:
        """Close the open groups no waiting or running cell belongs to (all, with no
        `waiting`): their allocations end once their last step did."""
        keep = set()
        if waiting is not None:
            keep = {self.group_of(req) for _, req, _ in waiting.values()}
            keep |= {self.group_of(act.request) for act in self.active}
        for group in sorted(self.open_groups - keep):
            self.launcher.close_group(group)
            self.open_groups.discard(group)

    def write_cell_provenance(self, cdir: Path, cell: Cell, spec: LaunchSpec) -> None:
        fields = dict(self.provenance)
        fields.update({"cell": cell.name, "cell.env_keys": " ".join(sorted(spec.env)),
                       "cell.started_utc": utc_now()})
        fields["cell.argv"] = shlex.join(store.redacted(spec.argv))
        write_provenance(cdir / PROVENANCE_TXT, fields)

    def poll(self, act: Active) -> JobResult | None:
        """The launcher's poll of a cell in flight; a launcher that raises (its fork server
        died, a bug) ends the cell as a harness failure, its processes cancelled."""
        if act.result is not None:
            return act.result
        try:
            return self.launcher.poll(act.handle)
        except EpcapError:
            raise
        except Exception as exc:            # noqa: BLE001 - the harness failed (issue 41)
            if disk_error(exc):
                raise
            try:
                self.launcher.cancel(act.handle)
            except Exception:               # noqa: BLE001, S110 - the first failure is named
                pass
            return harness_result(exc, f"{self.launcher.name} launcher, polling the cell",
                                  round(time.monotonic() - act.t0, 3))

    def harness_outcome(self, act: Active, result: JobResult, req: RunRequest,
                        cdir: Path) -> Outcome:
        """A harness failure's Outcome: class `harness`, the traceback in the cell's
        harness.txt, no measurement (docs/taxonomy.md#harness-failures)."""
        trace = cdir / HARNESS_TXT
        try:
            with open(trace, "a", encoding="utf-8") as fh:
                fh.write(f"{result.harness}\n\n{result.harness_trace}\n")
        except OSError:
            pass
        failure = {"status": Status.HARNESS, "path": str(trace), "line_no": None,
                   "line": result.harness,
                   "reason": "harness failure, not the run's: retried as a new attempt "
                             "without counting against the cell"}
        n = req.shape.uniform_tokens(req.model.topk)
        row = attempt_row(act.cell, n, act.backend.implementation(None), result, None,
                          Status.HARNESS, failure, act.started_utc)
        return Outcome(act.cell, Status.HARNESS, None, None, row, failure, None)

    def finish(self, act: Active, result: JobResult) -> Outcome:
        """Classify, summarize, record (cell.json, event, TSV row) and feed the ETA."""
        cdir = cell_dir(self.root, act.cell)
        req = RunRequest.for_cell(self.rb, act.cell, cdir)
        out = None
        if result.harness is None:
            try:
                out = analyse(req, act.backend, result, Path(act.handle.cell_dir),
                              act.started_utc)
            except EpcapError:
                raise
            except Exception as exc:        # noqa: BLE001 - the harness failed (issue 41)
                if disk_error(exc):
                    raise
                judged = harness_result(exc, "the driver, classifying the finished run")
                result = dataclasses.replace(result, harness=judged.harness,
                                             harness_trace=judged.harness_trace)
        if out is None:
            out = self.harness_outcome(act, result, req, cdir)
        harness = out.status == Status.HARNESS
        span = time.monotonic() - act.t0
        if not act.adopted and not harness:  # an adopted job's span began before this driver
            self.estimator.add(act.cell.backend, act.cell.model, act.cell.purpose, span,
                               act.cell.attempt)
        summary = out.summary.to_dict() if out.summary is not None else None
        store.write_cell_json(cdir, act.cell, act.spec, status=out.status, summary=summary,
                              timing=out.timing, failure=out.failure,
                              launcher={"state": result.state, "exit_code": result.exit_code,
                                        "detail": result.detail, "wall_s": result.wall_s})
        left = self.runs_left(exclude=act.cell)
        eta = self.eta(left)
        record = CellFinish(**CellRef.fields_of(act.cell), status=out.status,
                            row=out.row.as_dict(), summary=summary, timing=out.timing,
                            failure=out.failure, wall_s=result.wall_s,
                            steps=out.steps.to_dict() if out.steps is not None else None,
                            span_s=None if harness else round(span, 3), runs_left=len(left),
                            eta_s=None if eta is None else round(eta, 3),
                            stage=STAGE_OF_PURPOSE[act.cell.purpose])
        self.log.write(record)
        if harness:             # no attempts row, not a finished run: the request runs again
            self.report_cell(out, len(left), eta)
            return out
        if act.cell.purpose != Purpose.CANARY:
            append_row(self.root / ATTEMPTS_TSV, ATTEMPT_COLUMNS, out.row)
        key = (act.cell.model, act.cell.backend, act.cell.purpose)
        self.finished.setdefault(key, []).append(record)
        self.cursor[key] = len(self.finished[key])
        if act.cell.purpose == Purpose.FRONTIER:
            self.rungs_used.setdefault(key, set()).add(len(self.finished[key]) - 1)
        self.report_cell(out, len(left), eta)
        return out

    def retry_harness(self, out: Outcome) -> None:
        """A harness failure: say so and let the caller launch the request again with the
        retries it had; the (HARNESS_RETRIES + 1)-th in a row for one request stops the
        campaign (exit 3) naming the traceback's file."""
        key = (out.cell.model, out.cell.backend, out.cell.purpose)
        n = self.harness_fails[key] = self.harness_fails.get(key, 0) + 1
        trace = (out.failure or {}).get("path")
        if n > HARNESS_RETRIES:
            self.stop(out, f"campaign stopped: the harness failed {n} times in a row running "
                           f"{out.cell.name} ({(out.failure or {}).get('line')}); this is the "
                           f"harness or its environment, not the run: traceback in {trace}; "
                           "fix it, then rerun the same command (the cell runs again)",
                      "harness failure")
        self.view.line(f"    harness failure, not the run's (traceback in {trace}): retried as "
                       f"a new attempt, not counted against the cell ({n} of "
                       f"{HARNESS_RETRIES} in a row)")

    # -- progress ------------------------------------------------------------------------
    def planned_keys(self) -> list[PlannedCell]:
        return [p for p in plan_cells(self.rb) if self.ctx.stage_mode(p.stage) == StageMode.RUN]

    def runs_left(self, exclude: Cell | None = None) -> list[tuple[str, str, str, int]]:
        """(backend, model, purpose, attempt) of the planned runs not yet finished or skipped
        (the attempt each would get, numbered after those already made)."""
        out = []
        nth: dict[tuple[str, str, str], int] = {}
        done = {key: self.standing(runs) for key, runs in self.finished.items()}
        if exclude is not None:
            key = (exclude.model, exclude.backend, exclude.purpose)
            done[key] = done.get(key, 0) + 1
        for p in self.planned_keys():             # a key planned k times (launches) counts k
            key = (p.model, p.backend, p.purpose)
            if key in self.ctx.skipped or self.launches_stopped(key):
                continue
            if not self.ctx.selected(None if p.purpose == Purpose.CANARY else p.model,
                                     p.backend):
                continue
            if done.get(key, 0) > 0:
                done[key] -= 1
                continue
            nth[key] = nth.get(key, 0) + 1
            out.append((p.backend, p.model, p.purpose, self.attempts.get(key, 0) + nth[key]))
        return out

    def launches_stopped(self, key: tuple[str, str, str]) -> bool:
        """A timed arm that did not fit gets no further launches (decisions.time_step)."""
        return key[2] == Purpose.TIME and any(
            verdicts.stops_launches(e.status) for e in self.finished.get(key, []))

    def eta(self, left: list[tuple[str, str, str, int]]) -> float | None:
        eta = self.estimator.eta(left, self.rb.max_parallel_cells)
        if eta is None:
            return None
        eta *= self.pace
        for act in self.active:
            pred = self.estimator.predict(act.cell.backend, act.cell.model, act.cell.purpose,
                                          act.cell.attempt)
            if pred is not None:
                eta += max(0.0, pred - (time.monotonic() - act.t0))
        return eta + self.report_eta(self.done_runs + len(left) + len(self.active))

    def report_eta(self, runs: int) -> float:
        """Seconds the report will take after the runs (0 when this invocation writes none):
        earlier reports of the same work at this invocation's drift, else the cost model's
        prior scaled by how the runs measured against theirs, like a run never seen."""
        if self.ctx.stage_mode(Stage.REPORT) != StageMode.RUN:
            return 0.0
        if self.past.report_s > 0:
            return self.past.report_s * self.estimator.drift()
        if self.cost is None:
            return 0.0
        return self.cost.report_prior(runs) * self.estimator.prior_scale(Purpose.TIME)

    def report_cell(self, out: Outcome, left: int, eta: float | None) -> None:
        extra = f"  {out.failure.get('line')}" if out.failure.get("line") else ""
        self.view.line(f"  {out.cell.name}: {out.status} ({out.row.wall_s} s); "
                       f"{left} {'run' if left == 1 else 'runs'} left, ETA {fmt_s(eta)}{extra}")
        stage = STAGE_OF_PURPOSE[out.cell.purpose]
        stage_all = [p for p in self.planned_keys() if p.stage == stage]
        keys = {(p.model, p.backend, p.purpose) for p in stage_all}
        stage_done = min(len(stage_all), sum(self.standing(self.finished.get(k, [])) for k in keys))
        self.view.update(self.done_runs, self.done_runs + left, stage, stage_done,
                         len(stage_all), eta, out.cell.name)
        if self.on_publish is not None and stage_done >= len(stage_all) \
                and stage not in self.published_stages:
            self.published_stages.add(stage)            # live publishing: the stage as it is
            self.on_publish(f"stage {stage} finished")

    # -- tables --------------------------------------------------------------------------
    def write_tables(self, derived: bool = True) -> None:
        """Rebuild the attempts TSV from the events (and the others from pipeline state)."""
        store.write_attempts(self.root)
        store.write_timing_launches(self.root)
        if derived:
            self.write_derived()

    def write_derived(self) -> None:
        store.write_derived(self.root, self.rb, self.ctx.selection, self.ctx.timing,
                            self.ctx.comparison, self.ctx.trials, self.ctx.frontier)
        self.ctx.dirty = False

    # -- the loop ------------------------------------------------------------------------
    def run_pipelines(self, pipes: list[Pipe]) -> None:
        """Advance every pipeline: replay finished runs, start new ones, poll the launcher."""
        waiting: dict[int, tuple[Pipe, Request, int]] = {}
        written = -DERIVED_EVERY_S
        try:
            for pipe in pipes:
                self.advance(pipe, None, waiting, first=True)
            while waiting or self.active:
                for pid, (pipe, req, retries_left) in self.launch_order(waiting):
                    if len(self.active) >= self.rb.max_parallel_cells:
                        break
                    del waiting[pid]
                    self.active.append(self.launch(pipe, req, retries_left))
                if self.ctx.dirty and time.monotonic() - written >= DERIVED_EVERY_S:
                    self.write_derived()
                    written = time.monotonic()
                self.poll_once(waiting)
                self.close_groups(waiting)
            self.close_groups()
        finally:            # done, a stop (exit 3) or an interrupt: the tables as they stand
            if self.ctx.dirty:
                self.write_derived()

    def advance(self, pipe: Pipe, outcome: Outcome | None, waiting: dict,
                first: bool = False) -> None:
        """Send `outcome` in; replay from events until the pipeline needs a new run."""
        while True:
            try:
                req = next(pipe) if first else pipe.send(outcome)
            except StopIteration:
                return
            first = False
            outcome, retries_left = self.replay_with_retries(req)
            if outcome is None and not self.ctx.selected(req.model, req.backend):
                self.ctx.deferred.add((req.model, req.backend))    # outside --model/--backend
                return
            if outcome is None:
                stage = STAGE_OF_PURPOSE[req.purpose]
                if self.ctx.stage_mode(stage) != StageMode.RUN:
                    raise Replay(f"{req.model}/{req.backend}: no {req.purpose} results yet "
                                 f"(stage {stage} not selected); run that stage first")
                waiting[id(pipe)] = (pipe, req, retries_left)
                return
            self.check_bug(outcome)
            self.check_unclassified(outcome)

    def replay_with_retries(self, req: Request) -> tuple[Outcome | None, RetryBudget]:
        """Replay finished runs of `req`, skipping infra and unclassified failures that were
        retried (pipeline.replay.next_standing, the rule the audit replays by too).

        Returns the outcome the pipeline sees (None: a new run is needed) and the retries
        still allowed for that new run.
        """
        return next_standing(lambda: self.replayed(req), self.rb.limits)

    def poll_once(self, waiting: dict) -> None:
        time.sleep(getattr(self.launcher, "poll_s", POLL_S))
        for act in list(self.active):
            result = self.poll(act)
            if result is None:
                self.watch_queue(act)
                continue
            self.active.remove(act)
            out = self.finish(act, result)
            key = (act.request.model, act.request.backend, act.request.purpose)
            if out.status == Status.HARNESS:       # the same retries: not the cell's failure
                self.retry_harness(out)
                self.active.append(self.launch(act.pipe, act.request, act.retries_left))
                continue
            self.harness_fails.pop(key, None)
            self.check_bug(out)
            if act.retries_left.allows(out.status):
                self.active.append(self.launch(act.pipe, act.request,
                                               act.retries_left.spent(out.status)))
                continue
            self.check_unclassified(out)
            if act.pipe is not None:
                self.advance(act.pipe, out, waiting)

    def check_bug(self, out: Outcome) -> None:
        """assert / badflag stop the campaign (exit 3) naming the cell, log and line (and, for
        a configuration failure such as the scheduler's memory limit, the runbook field)."""
        if out.status not in BUG_CLASSES:
            return
        fail = out.failure or {}
        reason = str(fail.get("reason") or "")
        why = f"; {reason}" if reason.startswith(CONFIG_FAILURE) else ""   # names the field
        self.stop(out, f"campaign stopped: {out.status} in cell {out.cell.name}; log "
                       f"{fail.get('path')}:{fail.get('line_no')}: {fail.get('line')}{why}",
                  "bug-class failure")

    def check_unclassified(self, out: Outcome) -> None:
        """An unclassified run past its retries stops the campaign for a person (exit 3)
        when `limits.unclassified.then` is `stop`; with `continue` it stands as a failure. A
        read-only replay (`epcap status`, the dry run) records nothing and plans on past it."""
        policy = self.rb.limits.unclassified
        if out.status != Status.UNCLASSIFIED or policy.then != "stop" or self.log is None:
            return
        hint = f"epcap classify --explain {cell_dir(self.root, out.cell)}"
        self.stop(out, f"campaign stopped: {out.status} in cell {out.cell.name} (retried "
                       f"{policy.retries} times, limits.unclassified): nothing known says why "
                       f"it failed; run `{hint}` to see its timeline, then fix and resume, or "
                       "rerun it with `epcap run --retry unclassified`",
                  "unclassified failure", hint)

    def stop(self, out: Outcome, msg: str, reason: str, hint: str | None = None) -> None:
        """Stop the campaign on `out`: cancel the runs in flight, record the stop (event,
        STOPPED.txt) and raise CampaignStopped (exit 3) with `msg`."""
        fail = out.failure or {}
        self.cancel_active(reason)
        self.log.write(Stopped(cell=out.cell.name, status=out.status,
                                       log=fail.get("path"), line_no=fail.get("line_no"),
                                       line=fail.get("line"),
                                       stage=STAGE_OF_PURPOSE[out.cell.purpose], hint=hint))
        msg = redact_text(msg)
        write_text_atomic(self.root / STOPPED_TXT, msg + "\n")
        raise CampaignStopped(msg)

    def cancel_active(self, reason: str) -> None:
        for act in list(self.active):
            self.launcher.cancel(act.handle)
            self.log.write(CellAbandoned(cell=act.cell.name, reason=reason))
            store.mark_abandoned(cell_dir(self.root, act.cell), reason)
        self.active.clear()

    # -- preflight -----------------------------------------------------------------------
    def run_canaries(self) -> None:
        """One tiny run per backend; any failure other than does_not_fit stops here."""
        mode = self.ctx.stage_mode(Stage.PREFLIGHT)
        if mode == StageMode.STOP:
            return
        model = canary_model(self.rb)
        if mode == StageMode.RUN:
            self.warm_launcher(model)
        for b in self.rb.backends:
            req = Request(model, b.name, Purpose.CANARY, self.rb.capacity.measure)
            out, retries_left = self.replay_with_retries(req)
            if out is None and not self.ctx.selected(None, b.name):
                continue                    # outside --backend: its canary waits too
            if out is None and mode != StageMode.RUN:
                raise Replay(f"no canary results for {b.name}; run the preflight stage first")
            while out is None or out.status == Status.HARNESS \
                    or retries_left.allows(out.status):
                if out is not None and out.status == Status.HARNESS:
                    self.retry_harness(out)        # not the cell's: its retries stay
                elif out is not None:
                    retries_left = retries_left.spent(out.status)
                act = self.launch(None, req, retries_left)
                self.active.append(act)
                out = self.wait(act)
            self.check_bug(out)
            self.check_unclassified(out)
            if out.status not in CANARY_OK:
                fail = out.failure or {}
                self.log.write(Stopped(cell=out.cell.name, status=out.status,
                                               stage=Stage.PREFLIGHT, log=fail.get("path"),
                                               line_no=fail.get("line_no"),
                                               line=fail.get("line")))
                raise Findings(f"preflight: canary {out.cell.name} ended {out.status} "
                               f"({fail.get('reason', '')}); log "
                               f"{cell_dir(self.root, out.cell)}; nothing else was run")
        self.close_groups()

    def warm_launcher(self, model: str) -> None:
        """Hand the launcher the commands of the canaries still to run (built, not written
        or submitted), so what they start from starts at once, side by side."""
        specs = []
        for b in self.rb.backends:
            req = Request(model, b.name, Purpose.CANARY, self.rb.capacity.measure)
            cursor = dict(self.cursor)          # a look ahead: the replay below is the real one
            try:
                standing = self.replay_with_retries(req)[0]
            finally:
                self.cursor = cursor
            if not self.ctx.selected(None, b.name) or standing:
                continue
            cell = Cell(self.rb.campaign, model, b.name, Purpose.CANARY,
                        cap.format_capacity(req.capacity), 1)
            try:
                specs.append(self.backend(b.name).command(
                    RunRequest.for_cell(self.rb, cell, cell_dir(self.root, cell))))
            except ValueError:
                continue                    # launch() says why, naming the runbook
        self.launcher.warm(specs)

    def wait(self, act: Active) -> Outcome:
        while True:
            time.sleep(getattr(self.launcher, "poll_s", POLL_S))
            result = self.poll(act)
            if result is not None:
                self.active.remove(act)
                return self.finish(act, result)
            self.watch_queue(act)

    # -- the scheduler's queue -----------------------------------------------------------
    def watch_queue(self, act: Active) -> None:
        """Say when a job starts waiting in the scheduler's queue, waits for another reason,
        or leaves it (a line and a cell_queued event each), and stop the campaign once it
        has waited over `limits.max_pending_s` (0: wait forever)."""
        wait = self.launcher.queue_wait(act.handle)
        reason = wait.reason if wait is not None else None
        if reason != act.queued and self.log is not None:
            pending_s = wait.pending_s if wait is not None else 0.0
            self.log.write(CellQueued(cell=act.cell.name, job_id=str(act.handle.job_id),
                                      reason=reason, pending_s=round(pending_s, 3),
                                      max_pending_s=self.rb.limits.max_pending_s))
            self.view.line(f"  {act.cell.name}: " + (
                f"job {act.handle.job_id} pending: {reason} ({self.pending_limit_words()}; "
                "the ETA counts run time, not this wait)" if reason is not None else
                f"job {act.handle.job_id} left the queue ({act.queued} before)"))
            act.queued = reason
        limit = self.rb.limits.max_pending_s
        if wait is not None and limit and wait.pending_s > limit:
            self.stop_pending(act, wait)

    def pending_limit_words(self) -> str:
        """What the driver does with a job that stays queued, in words."""
        limit = self.rb.limits.max_pending_s
        return (f"stops the campaign after {fmt_s(limit)} queued (limits.max_pending_s)"
                if limit else "limits.max_pending_s 0: waits forever")

    def stop_pending(self, act: Active, wait: QueueWait) -> None:
        """A job queued over `limits.max_pending_s`: cancel the runs in flight, record the
        stop (event, STOPPED.txt) and raise CampaignStopped (exit 3) naming Slurm's reason."""
        job = act.handle.job_id
        msg = (f"campaign stopped: job {job} of cell {act.cell.name} has waited "
               f"{fmt_s(wait.pending_s)} in the queue, over limits.max_pending_s "
               f"{self.rb.limits.max_pending_s:g} s; pending: {wait.reason}")
        self.cancel_active(f"queued over limits.max_pending_s (pending: {wait.reason})")
        self.log.write(Stopped(cell=act.cell.name, status="pending",
                               line=f"job {job} pending: {wait.reason}",
                               stage=STAGE_OF_PURPOSE[act.cell.purpose]))
        msg = redact_text(msg)
        write_text_atomic(self.root / STOPPED_TXT, msg + "\n")
        raise CampaignStopped(msg)
