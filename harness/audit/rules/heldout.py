"""The validate cells' seeds: a validate cell whose recorded argv ran another seed than the
one the backend's own command for it passes (the measure seed under a held-out claim). The
validate step itself (step-ups, attempts, acceptance, the risk columns) is the pipeline's,
replayed on the cells by rules.pipeline.
"""

from __future__ import annotations

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.audit.model import (
    NOT_APPLICABLE,
    Cell,
    Check,
    Table,
    Upload,
    norm,
    verdict_of,
)
from harness.audit.rules.rederive import abandoned_cells, as_run, invalidated
from harness.audit.vocab import HELD_OUT_NOT_REDERIVED
from harness.errors import EpcapError
from harness.results.layout import parse_cell_name
from harness.vocab import Purpose


def validate_cells(upload: Upload, model: str, backend: str) -> list[Cell]:
    """The pair's validate cells in attempt order (the upload's cells, not its rows), less
    those a resume abandoned or a `cells_invalidated` event took out (a re-run's step starts
    afresh, as the driver's does)."""
    found = []
    dropped, gone = abandoned_cells(upload), invalidated(upload)
    for cell in upload.cells.values():
        named = parse_cell_name(cell.name, upload.runbook.campaign)
        if named is not None and named.purpose == Purpose.VALIDATE and cell.path not in dropped \
                and cell.name not in gone \
                and norm(named.model) == norm(model) and norm(named.backend) == norm(backend):
            found.append((named.attempt, cell))
    return [c for _, c in sorted(found, key=lambda x: x[0])]


def argv_seed(cell: Cell) -> str | None:
    """The value after `--seed` in the cell's recorded argv, else None."""
    argv = (cell.cell_json or {}).get("argv")
    if not isinstance(argv, list) or "--seed" not in argv:
        return None
    at = argv.index("--seed") + 1
    return str(argv[at]) if at < len(argv) else None


def seed_problem(upload: Upload, cell: Cell) -> str | None:
    """A cell that ran another seed than the one the harness passes its purpose: the value
    after `--seed` in the backend's own command for the cell against the recorded argv."""
    named = parse_cell_name(cell.name, upload.runbook.campaign)
    try:
        req = RunRequest.for_cell(upload.runbook, named, cell.where)
        spec = load_backend(upload.runbook.backend(named.backend)).command(req)
    except (EpcapError, KeyError, ValueError, LookupError, OSError):
        return None
    argv = [str(a) for a in getattr(spec, "argv", []) or []]
    if "--seed" not in argv:
        return None
    expected = argv[argv.index("--seed") + 1] if argv.index("--seed") + 1 < len(argv) else None
    ran = argv_seed(cell)
    if ran != expected:
        return (f"{cell.path}/cell.json: argv --seed {ran!r}, but the runbook as run gives a "
                f"{named.purpose} run seed {expected} (run_seed)")
    return None


def check_validate_seeds(table: Table, upload: Upload) -> Check:
    """Every validate cell ran the seed the runbook as run gives its purpose (the held-out
    claim is the pipeline's: rules.pipeline compares it)."""
    if not as_run(upload):
        return Check(HELD_OUT_NOT_REDERIVED, NOT_APPLICABLE, ["no runbook as run"])
    bad, unknown = [], []
    for row in table.rows:
        for cell in validate_cells(upload, row.get("model"), row.get("backend")):
            if cell.cell_json is None and cell.cell_json_problem:
                unknown.append(f"{cell.path}/cell.json: {cell.cell_json_problem}")
            elif (problem := seed_problem(upload, cell)):
                bad.append(problem)
    return verdict_of(bad, [], HELD_OUT_NOT_REDERIVED, unknown)


