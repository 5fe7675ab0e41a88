"""The code each cell ran against the runbook as run (`launch-not-runbook`): a cell's
recorded argv (cell.json `argv`) is the backend's own command for that cell's request
(`RunRequest.for_cell` + `Backend.command`, the calls the driver makes), so a run made with
other flags than the runbook states (a routing sigma, an iteration count, a seed, a model
shape) is seen even when every table, log and summary was re-stated from it. The memory
check: where a time cell's [EPCAP_TIMING] object says its peak memory was modelled (no
device to measure), that figure is the backend's own memory model for the request
(`Backend.modelled_peak_memory`: harness/loadmodel/memory.py), never a free number.

Paths are compared by name only when both are absolute (an upload audited elsewhere than
it ran: the interpreter, `--record-trace` under the results directory). The rebuilt argv is
redacted as the driver redacts the one it records (harness.io.redact.redact_argv: a
secret-named option's value, token shapes).
"""

from __future__ import annotations

from harness.api.backend import Backend, RunRequest
from harness.api.registry import load_backend
from harness.audit.model import NOT_APPLICABLE, Cell, Check, Rule, Source, Table, Upload, verdict_of
from harness.audit.rules.rederive import as_run, derive, invalidated
from harness.audit.vocab import LAUNCH_NOT_RUNBOOK
from harness.errors import EpcapError
from harness.io.redact import redact_argv
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON, parse_cell_name
from harness.vocab import Purpose


def same_arg(at: int, want: str, got: str) -> bool:
    """One argv item as recorded against the one the backend builds (module docstring)."""
    if want == got:
        return True
    if want.startswith("/") and got.startswith("/"):
        return at == 0 or want.rsplit("/", 1)[-1] == got.rsplit("/", 1)[-1]
    return False


def request_of(upload: Upload, cell: Cell) -> tuple[RunRequest, Backend] | None:
    """The request the driver makes for the cell, and its backend; None when the runbook as
    run names no such model or backend (cell-identity says so)."""
    named = parse_cell_name(cell.name, upload.runbook.campaign)
    if named is None or cell.where is None:
        return None
    try:
        req = RunRequest.for_cell(upload.runbook, named, cell.where)
        return req, load_backend(upload.runbook.backend(named.backend))
    except (EpcapError, KeyError, ValueError, LookupError, OSError):
        return None


def argv_problem(cell: Cell, req: RunRequest, backend: Backend) -> tuple[str | None, str | None]:
    """(contradiction, undecided) of one cell's recorded argv against its backend's command."""
    argv = (cell.cell_json or {}).get("argv")
    if not isinstance(argv, list):
        return None, f"{cell.path}/{CELL_JSON}: field argv missing"
    try:
        want = redact_argv([str(a) for a in backend.command(req).argv])  # as recorded
    except (EpcapError, KeyError, ValueError, LookupError, OSError) as exc:
        return None, f"{cell.path}: the backend builds no command ({type(exc).__name__})"
    got = [str(a) for a in argv]
    for at, (w, g) in enumerate(zip(want, got, strict=False)):
        if not same_arg(at, w, g):
            return (f"{cell.path}/{CELL_JSON}: argv[{at}] {g!r} where the runbook as run "
                    f"gives {w!r} (argv {' '.join(got[max(at - 1, 0):at + 2])!r})"), None
    if len(want) != len(got):
        extra = got[len(want):] or want[len(got):]
        return (f"{cell.path}/{CELL_JSON}: argv has {len(got)} items, the runbook as run's "
                f"command {len(want)} (differing from {extra[0]!r})"), None
    return None, None


def memory_problem(upload: Upload, cell: Cell, req: RunRequest, backend: Backend) -> str | None:
    """A time cell's modelled peak memory that is not its backend's memory model's."""
    named = parse_cell_name(cell.name, upload.runbook.campaign)
    if named is None or named.purpose != Purpose.TIME:
        return None
    obj = derive(upload, cell).timing
    if not isinstance(obj, dict) or obj.get("peak_mem_source") != "modelled":
        return None
    modelled = backend.modelled_peak_memory(req)
    stated = obj.get("peak_mem_bytes")
    if modelled is not None and stated != modelled:
        return (f"{cell.path}: [EPCAP_TIMING] peak_mem_bytes {stated!r} (modelled) but the "
                f"backend's memory model gives {modelled} for this run")
    return None


def check_launch(table: Table, upload: Upload) -> Check:
    """Every cell's argv is its backend's own command under the runbook as run, and every
    modelled peak memory is the memory model's; cells a `cells_invalidated` event took out
    (they ran under an earlier runbook) are not results and are skipped, as the replay does."""
    if not as_run(upload):
        return Check(LAUNCH_NOT_RUNBOOK, NOT_APPLICABLE, ["no runbook as run (the earlier "
                                                         "layout)"])
    bad, unknown, seen = [], [], 0
    gone = invalidated(upload)          # taken out of the results by a runbook edit or --retry
    for _, cell in sorted(upload.cells.items()):
        if cell.problem or cell.cell_json is None or cell.name in gone:
            continue
        found = request_of(upload, cell)
        if found is None:
            continue
        req, backend = found
        seen += 1
        wrong, undecided = argv_problem(cell, req, backend)
        bad += [wrong] if wrong else []
        unknown += [undecided] if undecided else []
        if (memory := memory_problem(upload, cell, req, backend)):
            bad.append(memory)
    return verdict_of(bad, [f"{seen} cells ran the runbook's command"] if seen else [],
                      LAUNCH_NOT_RUNBOOK, unknown)


RULES: tuple[Rule, ...] = (
    Rule(LAUNCH_NOT_RUNBOOK, "a cell's recorded argv is not its backend's own command for "
         "its request under the runbook as run, or a modelled peak memory is not the "
         "backend's memory model's",
         (Source(ATTEMPTS_TSV, ()),), False, check_launch,
         "runs made with other flags than the runbook states (a smoother routing, fewer "
         "iterations), every table re-stated from their logs", version_bound=True),
)
