"""The results directory of one campaign (docs/spec.md: results layout).

State lives in `events.jsonl` (append-only, fsynced); the TSVs are rebuilt from it on every
start, so a SIGKILL between an event and its TSV row can neither lose nor duplicate a row.
Also here: the campaign directories (resume or --fresh), the frozen runbook and its
fingerprint, `campaign.json` (the grid and shapes as data, so the report never re-parses the
runbook) and each cell's `cell.json`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

from harness.api.backend import LaunchSpec
from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.boundary.campaigns import (
    MARKER,
    CampaignRecord,
    campaign_record,
    choose_campaign_dir,
    records_under,
    write_marker,
)
from harness.io.lock import LOCK_NAME
from harness.io.redact import redact_comments, redact_obj, redact_text
from harness.io.safeio import RUNBOOK_MAX_BYTES, read_bytes
from harness.pipeline.decisions import Outcome
from harness.pipeline.stages import plan_cells, timed_arms
from harness.results.events import (
    CellAbandoned,
    CellFinish,
    CellSubmit,
    elapsed,
    parse_event,
    read_events,
    report_seconds,
    reruns_on_resume,
)
from harness.results.facts import CampaignFacts
from harness.results.layout import (
    ATTEMPTS_TSV,
    CELL_JSON,
    COMPARISON_TSV,
    EVENTS_JSONL,
    FRONTIER_TSV,
    PROVENANCE_TXT,
    RUNBOOK_YAML,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
    Cell,
    cell_dir,
)
from harness.results.provenance import (
    read_provenance,
    redact_argv,
    secret_values,
    write_provenance,
)
from harness.results.rows import (
    ATTEMPT_COLUMNS,
    COMPARISON_COLUMNS,
    FRONTIER_COLUMNS,
    SELECTION_COLUMNS,
    TIMING_COLUMNS,
    TIMING_LAUNCH_COLUMNS,
    TIMING_TRIAL_COLUMNS,
    AttemptRow,
    ComparisonRow,
    FrontierRow,
    SelectionRow,
    TimingLaunchRow,
    TimingRow,
    TimingTrialRow,
)
from harness.results.tables import write_table_atomic
from harness.runbook.model import Runbook
from harness.telemetry.steps import StepPeaks
from harness.telemetry.summary import LogSummary
from harness.timing.verdicts import PHASES, launch_stats
from harness.vocab import (
    CONTROL_SUFFIX,
    DURATION_CLASS,
    Event,
    Purpose,
    StageMode,
    Status,
    run_iterations,
    run_phase,
)


def choose_dir(root: Path, campaign: str, fresh: bool) -> Path:
    """The newest directory of `campaign` under the results root (resume), or a new one
    (--fresh, or none yet): recognised by the record epcap wrote, never by its name
    (harness/io/boundary/campaigns.py)."""
    return choose_campaign_dir(root, campaign, fresh, EVENTS_JSONL)[0]


def mark_campaign(folder: Path, campaign: str) -> None:
    """Write the campaign marker into a campaign directory that lacks it (a new one, or one
    started before markers), numbered after the campaign's other directories beside it."""
    own = campaign_record(folder, EVENTS_JSONL)
    if own is not None and own.campaign == campaign and (folder / MARKER).is_file():
        return
    others = [r.seq for r in records_under(folder.parent, EVENTS_JSONL)[0]
              if r.campaign == campaign and r.path != folder]
    write_marker(folder, campaign, max(others, default=0) + 1)


def zoo_path(rb: Runbook) -> Path | None:
    """The model zoo file the runbook read (models_file); no re-parse of the runbook."""
    return rb.models_path


def _runbook_bytes(path: Path) -> bytes:
    """A runbook or models file again (the bounded reader: it may have been swapped for a
    FIFO or a huge file since it was loaded)."""
    return read_bytes(path, max_bytes=RUNBOOK_MAX_BYTES)


def runbook_fingerprint(rb: Runbook) -> dict:
    """sha256 of the runbook file and its model zoo (bytes: what the provenance names)."""
    out = {"runbook_sha256": hashlib.sha256(_runbook_bytes(rb.path)).hexdigest()}
    zoo = zoo_path(rb)
    if zoo is not None and zoo.is_file():
        out["models_sha256"] = hashlib.sha256(_runbook_bytes(zoo)).hexdigest()
    return out


# What changes results, by part of the PARSED runbook (docs/campaign.md: partial re-runs).
# Everything else (comments, campaign paths, limits, launcher, Slurm options, repository
# paths, parallelism, the GPU-hour figure) changes no result and resumes.
GLOBAL_PARTS = ("shape", "capacity", "measure_phase", "validate_routing", "seed", "device_memory",
                "container")
TIMING_PART = "timing"                # warmup, iterations, trials: the time cells only
# Runbook fields that change no cell's result (tests/e2e/test_rerun.py checks that every
# Runbook field is either here or read by result_fields). timing's baseline, max_cv and
# control change only the comparison rows, which are rebuilt from the events every run;
# launches, resolution and max_launches change how many rounds run, not what one launch
# measures: the launches already run are kept (replayed in round order) and only missing
# rounds run.
NON_RESULT_FIELDS = frozenset({"path", "campaign", "limits", "launcher", "repositories",
                               "paths", "slurm", "cell_wall_hours", "max_parallel_cells",
                               "models_path", "model_origins", "publish",
                               # more frontier rungs add cells and keep the run ones (like
                               # timing.launches); a ladder's steps are campaigns of their own
                               "frontier_rungs", "ladder_sigmas", "ladder_models",
                               "ladder_backends"})
# (the runbook's `measure:` section is named after its purpose, hence the vocabulary word)
RESULT_FIELDS = frozenset({"models", "shape", "backends", "capacity", Purpose.MEASURE.value,
                           "timing", "container",
                           "device_memory_bytes", "seed", "validate_config"})


def _digest(value: Any) -> str:
    data = json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def _opts(options: Any) -> Any:
    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) else options


def result_fields(rb: Runbook) -> dict[str, str]:
    """sha256 of each result-bearing part of the parsed runbook: `shape`, `capacity`,
    `measure_phase`, `validate_routing`, `seed`, `device_memory`, `container` (engine and
    image), `timing` (warmup, iters, trials: not launches, which only add or drop rounds),
    `model:<NAME>` (the zoo entry after overrides, flags included) and
    `backend:<name>` (kind, module, select, time, flags, options)."""
    out = {
        "shape": _digest(dataclasses.asdict(rb.shape)),
        "capacity": _digest(dataclasses.asdict(rb.capacity)),
        "measure_phase": _digest(dataclasses.asdict(rb.measure)),
        "validate_routing": _digest(dataclasses.asdict(rb.validate)),
        "seed": _digest(rb.seed),
        "device_memory": _digest(rb.device_memory_bytes),
        # the image is the software under test; mounts and workdir only say where it runs
        "container": _digest([rb.container.engine, rb.container.image]),
        TIMING_PART: _digest([rb.timing.warmup, rb.timing.iters, rb.timing.trials]),
    }
    for m in rb.models:
        out[f"model:{m.name}"] = _digest(dataclasses.asdict(m))
    for b in rb.backends:
        out[f"backend:{b.name}"] = _digest([b.kind, b.module, b.select, b.time,
                                            list(b.flags), _opts(b.options)])
    return out


def changed_parts(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The result-bearing parts whose digest differs (a part only in `new` is an addition,
    which invalidates nothing: its cells simply have not run)."""
    return sorted(k for k in old if k in new and old[k] != new[k])


def affected_cells(finished: dict, parts: list[str]) -> list[str]:
    """Names of the finished cells a change of `parts` invalidates: a global part every
    cell; `timing` the time cells; `model:M` M's cells; `backend:B` B's cells (its canary
    and its control arm included). A measure or validate cell of a model invalidated makes
    that model's time cells stale too (the timing capacity derives from the selections)."""
    every = any(p in GLOBAL_PARTS for p in parts)
    models = {p.split(":", 1)[1] for p in parts if p.startswith("model:")}
    backends = {p.split(":", 1)[1] for p in parts if p.startswith("backend:")}
    timing = TIMING_PART in parts
    hit = [ev for runs in finished.values() for ev in runs
           if every or ev.model in models or base_backend(ev.backend) in backends
           or (timing and ev.purpose == Purpose.TIME)]
    return with_stale_timing(finished, hit)


def with_stale_timing(finished: dict, hit: list) -> list[str]:
    """`hit` (finished events) plus the time cells of every model whose measure or validate
    cell is among them, as cell names."""
    models = {ev.model for ev in hit if ev.purpose in (Purpose.MEASURE, Purpose.VALIDATE)}
    names = {ev.cell for ev in hit}
    names |= {ev.cell for runs in finished.values() for ev in runs
              if ev.purpose == Purpose.TIME and ev.model in models}
    return sorted(names)


def base_backend(name: str) -> str:
    """The runbook backend of an arm (`echo~control` is echo's)."""
    return name[:-len(CONTROL_SUFFIX)] if name.endswith(CONTROL_SUFFIX) else name


def retry_cells(finished: dict, classes: tuple[str, ...], selected) -> list[str]:
    """`--retry`: the finished cells (inside the --model/--backend selection) whose status
    is one of `classes`, with the time cells they make stale."""
    hit = [ev for runs in finished.values() for ev in runs
           if ev.status in classes and selected(ev.model, ev.backend)]
    return with_stale_timing(finished, hit) if hit else []


def revision(root: Path, rb: Runbook) -> tuple[dict, list[str]] | None:
    """None when the runbook file is byte-identical to the one the campaign last ran;
    else (the new fingerprint with its result fields, the result-bearing parts changed).
    BadInput for a campaign started before result fields were recorded."""
    events = read_events(root / EVENTS_JSONL)
    marks = [e for e in events if e["ev"] in (Event.CAMPAIGN_START, Event.RUNBOOK_REVISED)]
    if not marks:
        return None
    last = marks[-1]
    now = runbook_fingerprint(rb)
    fields = result_fields(rb)
    if all(last.get(k) in (None, v) for k, v in now.items()):
        if last.get("result_fields") in (None, {}, fields):
            return None
    old_fields = last.get("result_fields") or {}
    if not old_fields:
        key = next(k for k, v in now.items() if last.get(k) and last[k] != v)
        raise BadInput(f"{key.split('_')[0]} file changed since this campaign started in "
                       f"{root} (sha256 {last[key][:12]} -> {now[key][:12]}), and this "
                       "campaign predates per-field resume; rerun with --fresh",
                       path=str(rb.path), field=key.split("_")[0])
    return {**now, "result_fields": fields}, changed_parts(old_fields, fields)


def freeze_runbook(root: Path, rb: Runbook) -> None:
    """runbook.yaml (and its zoo, when it sits next to it) copied as run, secrets redacted;
    a zoo whose file name holds a secret is not copied (the name would leak it)."""
    write_text_atomic(root / RUNBOOK_YAML, redact_comments(_runbook_bytes(rb.path).decode(
        "utf-8", "replace")))
    zoo = zoo_path(rb)
    if zoo is not None and zoo.is_file():
        rel = os.path.relpath(zoo, rb.path.parent)
        if redact_text(rel) != rel:
            return
        target = (root / rel).resolve()
        if root.resolve() in target.parents:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, redact_comments(_runbook_bytes(zoo).decode("utf-8",
                                                                                "replace")))


HISTORY_CAMPAIGNS = 20     # the newest campaign directories the ETA learns from


@dataclasses.dataclass(frozen=True)
class History:
    """What earlier campaigns of the same work measured (the ETA's prior)."""

    runs: tuple[tuple[str, str, str, int, float], ...] = ()  # backend, model, purpose, attempt, s
    startup_s: float = 0.0      # median run_start -> first submit of an invocation
    pace: float = 1.0           # median wall / summed run time between first submit and end
    campaigns: int = 0          # how many earlier campaigns taught it
    where: tuple[str, ...] = ()     # the results roots searched
    totals: tuple[float, ...] = ()  # summed run seconds of each complete earlier campaign
    report_s: float = 0.0       # median seconds from the runs' end to the report written

    @property
    def band(self) -> tuple[float, float] | None:
        """min and max of the complete campaigns' summed run times over their median: how
        much the same work varied (None with fewer than two)."""
        if len(self.totals) < 2:
            return None
        mid = _median(list(self.totals))
        return round(min(self.totals) / mid, 2), round(max(self.totals) / mid, 2)


def history_files(root: Path, roots: tuple[Path, ...] = ()) -> list[Path]:
    """events.jsonl of the campaigns beside `root` and in each of `roots` (a results root, or
    a campaign directory itself), oldest first by their records, `root`'s own left out; only
    directories epcap recorded as campaigns count (a stray folder or a dangling link: ignored)."""
    found: dict[Path, CampaignRecord] = {}
    for base in (root.parent, *roots):
        own = campaign_record(Path(base), EVENTS_JSONL)
        for rec in ([own] if own is not None else []) + records_under(Path(base), EVENTS_JSONL)[0]:
            if rec.path.resolve() != root.resolve():
                found[rec.path.resolve()] = rec
    return [r.path / EVENTS_JSONL
            for r in sorted(found.values(), key=lambda r: (r.started, str(r.path)))]


def history(root: Path, rb: Runbook, roots: tuple[Path, ...] = ()) -> History:
    """What earlier campaigns under the same results root measured for the same work: the
    (backend, model, purpose, attempt, seconds) of their finished runs whose model, backend
    and every global result-bearing part (shape, iterations, capacities, seeds) match this
    runbook's; each invocation's start-up seconds (run_start to its first submit) and pace
    (its wall time over its summed run time: the driver's own share between runs). The ETA's
    prior before this campaign has run anything (docs/campaign.md: ETA). `roots`: more results
    roots (`epcap run --history DIR`) searched like `root`'s own."""
    mine = result_fields(rb)
    same_globals = [k for k in mine if ":" not in k]
    found = history_files(root, roots)[-HISTORY_CAMPAIGNS:]
    campaigns = 0
    totals: list[float] = []
    runs: list[tuple[str, str, str, int, float]] = []
    startup: list[float] = []
    paces: list[float] = []
    reports: list[float] = []
    for path in found:
        try:
            events = read_events(path)
        except (BadInput, OSError):
            continue                        # a damaged neighbour teaches nothing
        start = next((e for e in events if e["ev"] == Event.CAMPAIGN_START), {})
        theirs = start.get("result_fields") or {}
        if any(theirs.get(k) != mine[k] for k in same_globals):
            continue
        before = len(runs)
        for e in events:
            if (e["ev"] == Event.CELL_FINISH and e.get("span_s")
                    and theirs.get(f"model:{e.get('model')}") == mine.get(f"model:{e.get('model')}")
                    and theirs.get(f"backend:{base_backend(str(e.get('backend')))}")
                    == mine.get(f"backend:{base_backend(str(e.get('backend')))}")):
                runs.append((str(e["backend"]), str(e["model"]), str(e["purpose"]),
                             int(e.get("attempt") or 0), float(e["span_s"])))
        run_ev = first = None
        spans = 0.0
        for e in events:
            if e["ev"] == Event.RUN_START:
                run_ev, first, spans = e, None, 0.0
            elif e["ev"] == Event.CELL_SUBMIT and run_ev is not None and first is None:
                startup.append(elapsed(run_ev, e))
                first = e
            elif e["ev"] == Event.CELL_FINISH:
                spans += float(e.get("span_s") or 0.0)
            elif e.get("runs_complete") and first is not None and spans > 0:
                paces.append(elapsed(first, e) / spans)
        campaigns += len(runs) > before
        if len(runs) > before:
            reports += report_seconds(events)
        if any(e.get("runs_complete") for e in events) and len(runs) > before:
            totals.append(sum(r[4] for r in runs[before:]))
    return History(tuple(runs), _median(startup), min(2.0, max(1.0, _median(paces) or 1.0)),
                   campaigns, tuple(str(Path(r)) for r in (root.parent, *roots)),
                   tuple(totals), _median(reports))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def record_invocation(root: Path, command_line: list[str], lines: dict[str, str]) -> None:
    """Add this invocation to the campaign's provenance.txt when it re-ran part of the
    campaign (`resume.<n>.*`: command line, --model/--backend/--retry, runbook edits and the
    cells they invalidated); a plain resume adds nothing."""
    path = root / PROVENANCE_TXT
    if not lines or not path.is_file():
        return
    fields = read_provenance(path)
    n = 1 + sum(1 for k in fields if k.startswith("resume.") and k.endswith(".command_line"))
    fields[f"resume.{n}.command_line"] = shlex.join(redacted(command_line))
    fields[f"resume.{n}.utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    fields.update({f"resume.{n}.{k}": v for k, v in lines.items()})
    write_provenance(path, fields)


def check_event_log(root: Path, campaign: str) -> None:
    """Refuse a campaign directory that holds results but lost its events.jsonl: resuming
    would rebuild the tables short and overwrite the cells' logs."""
    if (root / EVENTS_JSONL).exists() or not root.is_dir():
        return
    held = sorted(p.name for p in root.iterdir() if p.name not in (LOCK_NAME, MARKER))
    if held:
        raise BadInput(f"holds results ({len(held)} entries) but no {EVENTS_JSONL}; epcap "
                       f"will not resume over them. Restore {EVENTS_JSONL} from a backup to "
                       "resume, or rerun with --fresh to start a new directory next to it "
                       f"(results/{campaign}-N); the old one is never written", path=str(root))


def campaign_facts(rb: Runbook, implementations: dict[str, str]) -> CampaignFacts:
    """campaign.json: the grid, shapes and backends as data for report and audit."""
    return CampaignFacts(
        campaign=rb.campaign, pad_multiple=rb.capacity.pad_multiple,
        grid=str(rb.capacity.grid),
        measure_capacity=rb.capacity.measure,
        shape=dataclasses.asdict(rb.shape),
        models={m.name: {"topk": m.topk, "experts": m.experts, "moe_layers": m.moe_layers,
                         "uniform_tokens": rb.shape.uniform_tokens(m.topk)}
                for m in rb.models},
        backends=[{"name": b.name, "selected": b.select, "timed": b.time,
                   "implementation": implementations.get(b.name)} for b in rb.backends],
        baseline=rb.baseline,
        launches=rb.timing.launches,
        max_cv=rb.timing.max_cv,
    )


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def redacted(argv: list) -> list[str]:
    """argv with the values of secret-named environment variables masked."""
    return redact_argv([str(a) for a in argv], secret_values())


def write_cell_json(cdir: Path, cell: Cell, spec: LaunchSpec, status: str, **extra) -> None:
    """cell.json: the cell, argv, env KEYS only (never values), status and results."""
    doc = {"cell": dataclasses.asdict(cell), "name": cell.name, "argv": redacted(spec.argv),
           "env_keys": sorted(spec.env), "ntasks": spec.ntasks, "nodes": spec.nodes,
           "gpus_per_node": spec.gpus_per_node, "cwd": spec.cwd, "status": status}
    doc.update(extra)
    doc = redact_obj(jsonable(doc))
    write_text_atomic(cdir / CELL_JSON, json.dumps(doc, indent=1) + "\n")


ABANDONED = "abandoned"


def mark_abandoned(cdir: Path, reason: str) -> None:
    """cell.json of a cell whose driver stopped mid-run: status `abandoned`, with why and
    when (it is re-run as a new attempt; this one never gets a result)."""
    path = cdir / CELL_JSON
    try:
        doc = json.loads(read_bytes(path, max_bytes=CELL_JSON_MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError, BadInput):
        doc = None
    if not isinstance(doc, dict):
        return                      # never written (killed before), or not ours to fix
    doc.update(status=ABANDONED, abandoned={
        "reason": reason, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    write_text_atomic(path, json.dumps(redact_obj(doc), indent=1) + "\n")


CELL_JSON_MAX_BYTES = 1 << 24


def unfinished_starts(root: Path) -> list[CellSubmit]:
    """Cells submitted by an earlier driver that never finished nor were abandoned (the
    newest submit or start record of each)."""
    records = [parse_event(e) for e in read_events(root / EVENTS_JSONL)]
    closed = {r.cell for r in records if isinstance(r, (CellFinish, CellAbandoned))}
    latest: dict[str, CellSubmit] = {}
    for rec in records:
        if isinstance(rec, CellSubmit) and rec.cell not in closed:
            latest.pop(rec.cell, None)
            latest[rec.cell] = rec
    return list(latest.values())


def write_attempts(root: Path) -> None:
    """Rebuild capacity_attempts.tsv from the cell_finish events (canaries are not rows, nor
    harness failures: the harness failed, not a run of the cell)."""
    rows = [AttemptRow.from_record(e["row"]) for e in read_events(root / EVENTS_JSONL)
            if e["ev"] == Event.CELL_FINISH and e.get("purpose") != Purpose.CANARY
            and e.get("status") != Status.HARNESS]
    write_table_atomic(root / ATTEMPTS_TSV, ATTEMPT_COLUMNS, rows)


def invalidated_cells(events: list[dict]) -> set[str]:
    """Cells a cells_invalidated event took out of the results (runbook edit, --retry)."""
    return {str(c) for e in events if e["ev"] == Event.CELLS_INVALIDATED
            for c in e.get("cells") or []}


def write_timing_launches(root: Path) -> None:
    """Rebuild timing_launches.tsv from the cell_finish events: one row per timed launch
    (that measured timing) and phase, launches numbered per (model, arm) in run order;
    invalidated cells are left out (their figures no longer count)."""
    events = read_events(root / EVENTS_JSONL)
    gone = invalidated_cells(events)
    counter: dict[tuple[str, str], int] = {}
    rows = []
    for e in events:
        if (e["ev"] != Event.CELL_FINISH or e.get("purpose") != Purpose.TIME
                or e.get("cell") in gone):
            continue
        key = (str(e.get("model")), str(e.get("backend")))
        counter[key] = counter.get(key, 0) + 1
        timing = e.get("timing") or {}
        if not isinstance(timing, dict) or timing.get(f"{PHASES[0]}_ms_median") is None:
            continue
        cell_dir_text = (e.get("row") or {}).get("cell_dir")
        impl = timing.get("backend_impl") or (e.get("row") or {}).get("backend_impl")
        for phase in PHASES:
            rows.append(TimingLaunchRow(
                campaign=str(e.get("campaign")), model=key[0], backend=key[1],
                launch=counter[key], phase=phase, **launch_stats(timing, phase),
                trials=timing.get("trials"), cell_dir=cell_dir_text, backend_impl=impl))
    write_table_atomic(root / TIMING_LAUNCHES_TSV, TIMING_LAUNCH_COLUMNS, rows)


def write_derived(root: Path, rb: Runbook, selection: dict[tuple[str, str], SelectionRow],
                  timing: dict[tuple[str, str], TimingRow],
                  comparison: dict[str, list[ComparisonRow]] | None = None,
                  trials: dict[str, list[TimingTrialRow]] | None = None,
                  frontier: dict[tuple[str, str], list[FrontierRow]] | None = None) -> None:
    """capacity_selection.tsv, timing.tsv, comparison.tsv, timing_trials.tsv and (when the
    runbook asks for a capacity frontier) frontier.tsv, rows in runbook (model, backend)
    order, the A/A control arm after the backends."""
    _, arms = timed_arms(rb)
    names = [b.name for b in rb.backends] + [a for a in arms if a not in
                                               {b.name for b in rb.backends}]
    order = {(m.name, name): (i, j) for i, m in enumerate(rb.models)
             for j, name in enumerate(names)}

    def ordered(table: dict) -> list:
        return [table[k] for k in sorted(table, key=lambda k: order.get(k, (999, 999)))]

    write_table_atomic(root / SELECTION_TSV, SELECTION_COLUMNS, ordered(selection))
    write_table_atomic(root / TIMING_TSV, TIMING_COLUMNS, ordered(timing))
    if comparison is not None:
        rows = [r for m in rb.models for r in comparison.get(m.name, [])]
        write_table_atomic(root / COMPARISON_TSV, COMPARISON_COLUMNS, rows)
    if trials is not None:
        trial_rows = [r for m in rb.models for r in trials.get(m.name, [])]
        write_table_atomic(root / TIMING_TRIALS_TSV, TIMING_TRIAL_COLUMNS, trial_rows)
    if frontier is not None and rb.frontier_rungs:
        write_table_atomic(root / FRONTIER_TSV, FRONTIER_COLUMNS,
                           [r for rows in ordered(frontier) for r in rows])
    elif frontier is not None:      # `frontier:` taken out on resume: its runs were too
        (root / FRONTIER_TSV).unlink(missing_ok=True)


def rerun_on_resume(fin: CellFinish) -> bool:
    """Runs that stopped the campaign (a bug, a failed canary) run again after a fix."""
    return reruns_on_resume(fin.status, fin.purpose)


def outcome_of(fin: CellFinish) -> Outcome:
    """The Outcome a cell_finish event recorded (its summary an object again)."""
    summary = LogSummary.from_dict(fin.summary) if fin.summary else None
    steps = StepPeaks.from_dict(fin.steps) if fin.steps else None
    return Outcome(fin.to_cell(), fin.status, summary, fin.timing,
                   AttemptRow.from_record(fin.row or {}), fin.failure or {}, steps)


def iterations_per_purpose(rb: Runbook) -> dict[str, int]:
    """Iterations one run of each duration class makes (the ETA's prior for unseen ones)."""
    return {DURATION_CLASS[p]: run_iterations(run_phase(rb, p), p) for p in Purpose}


def check_cells_present(root: Path, finished: dict) -> None:
    """A finished run's cell directory must still exist: its logs are the evidence of its
    TSV row. A lost one is refused (not re-run in place) with how to recover."""
    for runs in finished.values():
        for ev in runs:
            cell = outcome_of(ev).cell
            if not cell_dir(root, cell).is_dir():
                raise BadInput(f"the cell directory of finished run {cell.name} is missing "
                               f"({cell_dir(root, cell)}): restore it from a backup to "
                               "resume, or rerun with --fresh for a new campaign directory",
                               path=str(root))


def check_replay_inputs(rb: Runbook, ctx, root: Path, finished: dict) -> None:
    """--stage: refuse up front when a stage that may not run lacks its results."""
    if not ctx.stages:
        return
    for p in plan_cells(rb):
        key = (p.model, p.backend, p.purpose)
        if (ctx.stage_mode(p.stage) == StageMode.REPLAY and key not in finished
                and p.capacity is not None):
            raise BadInput(f"stage {p.stage} has no results for {p.model}/{p.backend} in "
                           f"{root}; run it first (e.g. --until {p.stage})", field="--stage")
