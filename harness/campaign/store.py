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
from pathlib import Path
from typing import Any

from harness.api.backend import LaunchSpec
from harness.campaign.decisions import Outcome
from harness.campaign.stages import plan_cells, timed_arms
from harness.errors import BadInput
from harness.io.atomic import write_text_atomic
from harness.io.lock import LOCK_NAME
from harness.io.redact import redact_obj, redact_text
from harness.results.events import CellAbandoned, CellFinish, CellSubmit, parse_event, read_events
from harness.results.facts import CampaignFacts
from harness.results.layout import (
    ATTEMPTS_TSV,
    CELL_JSON,
    COMPARISON_TSV,
    EVENTS_JSONL,
    RUNBOOK_YAML,
    SELECTION_TSV,
    TIMING_TSV,
    Cell,
    cell_dir,
)
from harness.results.provenance import redact_argv, secret_values
from harness.results.rows import (
    ATTEMPT_COLUMNS,
    COMPARISON_COLUMNS,
    SELECTION_COLUMNS,
    TIMING_COLUMNS,
    AttemptRow,
    ComparisonRow,
    SelectionRow,
    TimingRow,
)
from harness.results.tables import write_table_atomic
from harness.runbook.model import Runbook
from harness.telemetry.steps import StepPeaks
from harness.telemetry.summary import LogSummary
from harness.vocab import (
    BUG_CLASSES,
    CANARY_OK,
    DURATION_CLASS,
    Event,
    Purpose,
    StageMode,
    run_iterations,
    run_phase,
)


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


def zoo_path(rb: Runbook) -> Path | None:
    """The model zoo file the runbook read (models_file); no re-parse of the runbook."""
    return rb.models_path


def runbook_fingerprint(rb: Runbook) -> dict:
    """sha256 of the runbook file and its model zoo (resume refuses a changed runbook)."""
    out = {"runbook_sha256": hashlib.sha256(rb.path.read_bytes()).hexdigest()}
    zoo = zoo_path(rb)
    if zoo is not None and zoo.is_file():
        out["models_sha256"] = hashlib.sha256(zoo.read_bytes()).hexdigest()
    return out


def check_fingerprint(root: Path, rb: Runbook) -> None:
    """BadInput when the runbook or zoo changed since this campaign directory started."""
    first = next((e for e in read_events(root / EVENTS_JSONL)
                  if e["ev"] == Event.CAMPAIGN_START), None)
    if first is None:
        return
    for key, value in runbook_fingerprint(rb).items():
        if first.get(key) and first[key] != value:
            raise BadInput(f"{key.split('_')[0]} file changed since this campaign started "
                           f"in {root} (sha256 {first[key][:12]} -> {value[:12]}); rerun with "
                           "--fresh to start a new campaign directory",
                           path=str(rb.path), field=key.split("_")[0])


def freeze_runbook(root: Path, rb: Runbook) -> None:
    """runbook.yaml (and its zoo, when it sits next to it) copied as run, secrets redacted;
    a zoo whose file name holds a secret is not copied (the name would leak it)."""
    write_text_atomic(root / RUNBOOK_YAML, redact_text(rb.path.read_text(encoding="utf-8")))
    zoo = zoo_path(rb)
    if zoo is not None and zoo.is_file():
        rel = os.path.relpath(zoo, rb.path.parent)
        if redact_text(rel) != rel:
            return
        target = (root / rel).resolve()
        if root.resolve() in target.parents:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, redact_text(zoo.read_text(encoding="utf-8")))


def check_event_log(root: Path, campaign: str) -> None:
    """Refuse a campaign directory that holds results but lost its events.jsonl: resuming
    would rebuild the tables short and overwrite the cells' logs."""
    if (root / EVENTS_JSONL).exists() or not root.is_dir():
        return
    held = sorted(p.name for p in root.iterdir() if p.name != LOCK_NAME)
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
    """Rebuild capacity_attempts.tsv from the cell_finish events (canaries are not rows)."""
    rows = [AttemptRow.from_record(e["row"]) for e in read_events(root / EVENTS_JSONL)
            if e["ev"] == Event.CELL_FINISH and e.get("purpose") != Purpose.CANARY]
    write_table_atomic(root / ATTEMPTS_TSV, ATTEMPT_COLUMNS, rows)


def write_derived(root: Path, rb: Runbook, selection: dict[tuple[str, str], SelectionRow],
                  timing: dict[tuple[str, str], TimingRow],
                  comparison: dict[str, list[ComparisonRow]] | None = None) -> None:
    """capacity_selection.tsv, timing.tsv and comparison.tsv, rows in runbook (model,
    backend) order, the A/A control arm after the backends."""
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


def rerun_on_resume(fin: CellFinish) -> bool:
    """Runs that stopped the campaign (a bug, a failed canary) run again after a fix."""
    return fin.status in BUG_CLASSES or (fin.purpose == Purpose.CANARY
                                         and fin.status not in CANARY_OK)


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
