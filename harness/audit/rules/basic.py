"""The first audit rules (docs/spec.md#audit-rules): old selection, missing stages, a fabricated
requirement, unexecutable capacities and mixed timing capacities. Pure, over the model."""

from __future__ import annotations

from decimal import Decimal

from harness.audit.model import (
    FAIL,
    NOT_APPLICABLE,
    Cell,
    Check,
    Row,
    Rule,
    Source,
    Table,
    Upload,
    cell_name,
    decimal_of,
    int_of,
    norm,
    verdict_of,
    where,
)
from harness.audit.rules.selection import replayed_instead
from harness.audit.vocab import (
    CELL_TAG,
    ECHO,
    FABRICATED,
    MIXED_TIMING,
    NATURAL,
    NO_MEASURE_VALIDATE,
    P_CANARY,
    P_MEASURE,
    P_NATURAL,
    P_TIME,
    P_VALIDATE,
    S_DOES_NOT_FIT,
    UNEXECUTABLE,
)
from harness.errors import EpcapError
from harness.grid.capacity import is_executable
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV


def is_echo(row: Row) -> bool:
    """ECHO = echo = ＥＣＨＯ (NFKC, case-folded)."""
    return row.name("backend") == ECHO


def check_natural(table: Table, upload: Upload) -> Check:
    """ECHO attempts with purpose=natural are the old, invalid selection."""
    bad = [where(table, r) for r in table.rows if is_echo(r) and r.name("purpose") == P_NATURAL]
    return verdict_of([f"ECHO purpose=natural at {w}" for w in bad], [], NATURAL, [])


def check_measure_validate(table: Table, upload: Upload) -> Check:
    """Without the runbook as run (the earlier layout): every model with ECHO attempts has
    measure rows and validate rows; a model whose ECHO measure runs all ended does_not_fit
    has no validate row by design. With it, n/a: the replayed pipeline says which runs each
    pair makes and where a step ended it (its Stop), and a missing one is
    selection-not-rederived or held-out-not-rederived."""
    replay = replayed_instead(NO_MEASURE_VALIDATE, upload)
    if replay:
        return replay
    purposes: dict[str, set[str]] = {}
    statuses: dict[str, set[str]] = {}
    shown: dict[str, str] = {}
    for row in table.rows:
        if is_echo(row) and row.name("purpose") != P_CANARY:
            model = row.name("model")
            shown.setdefault(model, row.get("model"))
            purposes.setdefault(model, set()).add(row.name("purpose"))
            if row.name("purpose") == P_MEASURE:
                statuses.setdefault(model, set()).add(row.name("status"))
    bad = []
    for model, seen in sorted(purposes.items()):
        label = shown[model] or "(no model)"
        if P_MEASURE not in seen:
            bad.append(f"{label}: ECHO has no purpose=measure row")
        elif P_VALIDATE not in seen and statuses.get(model) != {S_DOES_NOT_FIT}:
            bad.append(f"{label}: ECHO has no purpose=validate row")
    return verdict_of(bad, [], NO_MEASURE_VALIDATE, [])


def check_fabricated(table: Table, upload: Upload) -> Check:
    """ECHO required_capacity exactly 1.0 for every model is an assumption, not a measurement."""
    values, unknown = [], []
    for row in table.rows:
        if not is_echo(row) or not row.get("required_capacity"):
            continue
        value = decimal_of(row.get("required_capacity"))
        if value is None:
            unknown.append(f"{where(table, row)}: required_capacity "
                           f"{row.get('required_capacity')!r} is not a number")
        else:
            values.append(value)
    if values and all(v == 1 for v in values) and not unknown:
        return Check(FABRICATED, FAIL, [f"{table.name}: every ECHO required_capacity is "
                                        f"exactly 1.0 ({len(values)} rows)"])
    return verdict_of([], [], FABRICATED, unknown)


def find_uniform_tokens(data: dict) -> int | None:
    """N from cell.json: summary.expected_recv, uniform_tokens, or seq x micro_batch x topk
    (at the top or one level deep)."""
    def positive(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0
    summary = data.get("summary")
    if isinstance(summary, dict) and positive(summary.get("expected_recv")):
        return summary["expected_recv"]
    for scope in [data, *[v for v in data.values() if isinstance(v, dict)]]:
        if positive(scope.get("uniform_tokens")):
            return scope["uniform_tokens"]
        parts = [scope.get(k) for k in ("seq", "micro_batch", "topk")]
        if all(positive(p) for p in parts):
            return parts[0] * parts[1] * parts[2]
    return None


def cell_ns(cell: Cell | None) -> dict[str, int]:
    """N as the cell states it: from cell.json, and from its logs' expected_recv."""
    found: dict[str, int] = {}
    if cell is None:
        return found
    n = find_uniform_tokens(cell.cell_json) if cell.cell_json else None
    if n:
        found["cell.json"] = n
    if cell.logs and len(cell.logs.expected_recv) == 1:
        found["logs"] = cell.logs.expected_recv[0]
    return found


def executable_row(row: Row, upload: Upload) -> tuple[bool | None, str]:
    """Whether a row's capacity is executable for its shape; None with why if undecidable.

    The shape is every N stated for the row (its uniform_tokens, its cell's cell.json and
    logs): a capacity one of them rejects is not executable, whatever the row says.
    """
    capacity = row.get("capacity")
    if decimal_of(capacity) is None or decimal_of(capacity) <= 0:
        return None, f"capacity {capacity!r} is not a positive number"
    ns = cell_ns(upload.cell_for(row))
    text = row.get("uniform_tokens")
    if int_of(text):
        ns = {"uniform_tokens": int(text), **ns}
    pad = upload.pad_multiple
    try:
        for source, n in ns.items():
            if not is_executable(capacity, n, pad):
                return False, f"capacity {capacity} at N={n} ({source}, pad {pad})"
        if ns:
            return True, ""
    except (EpcapError, OverflowError, ValueError) as exc:
        return None, str(exc)
    budget = int_of(row.get("budget_tokens"))
    if budget is not None:
        return budget % pad == 0, f"budget_tokens {budget} (pad {pad})"
    return None, "no uniform_tokens, budget_tokens or cell.json shape (column uniform_tokens)"


def check_unexecutable(table: Table, upload: Upload) -> Check:
    """A capacity that is not executable for its shape can only have crashed (docs/spec.md#grid).

    Rows are checked, and so are cell directories no row names (e.g. `__cap1p02` crash
    cells); a directory whose shape cannot be found is not a recorded result and is skipped.
    """
    bad, unknown = [], []
    for row in table.rows:
        ok, why = executable_row(row, upload)
        if ok is False:
            bad.append(f"{where(table, row)}: {why} is not executable")
        elif ok is None:
            unknown.append(f"{where(table, row)}: {why}")
    bad += unexecutable_cells(table, upload)
    return verdict_of(bad, [], UNEXECUTABLE, unknown)


def unexecutable_cells(table: Table, upload: Upload) -> list[str]:
    """Cell directories (not named by any row) tagged with a capacity their shape rejects."""
    named = {id(upload.cell_for(r)) for r in table.rows if upload.cell_for(r)}
    per_model: dict[str, set[int]] = {}
    for row in table.rows:
        if int_of(row.get("uniform_tokens")):
            per_model.setdefault(row.name("model"), set()).add(int(row.get("uniform_tokens")))
    bad = []
    for key, cell in sorted(upload.cells.items()):
        match = CELL_TAG.search(cell.name)
        if id(cell) in named or not match:
            continue
        n = find_uniform_tokens(cell.cell_json) if cell.cell_json else None
        shapes = per_model.get(norm(cell.name.split("__", 1)[0]), set())
        n = n or (next(iter(shapes)) if len(shapes) == 1 else None)
        capacity = f"{match.group(1)}.{match.group(2)}"
        try:
            if n and not is_executable(capacity, n, upload.pad_multiple):
                bad.append(f"{key}: capacity {capacity} at N={n} is not executable")
        except (EpcapError, OverflowError, ValueError):
            continue
    return bad


def check_mixed_timing(table: Table, upload: Upload) -> Check:
    """Without the runbook as run (the earlier layout): all of one model's timing rows use
    one capacity, whatever the backend. With it, n/a: the replayed time step says at which
    capacity each arm runs (timing-not-rederived)."""
    replay = replayed_instead(MIXED_TIMING, upload)
    if replay:
        return replay
    column = "timing_capacity" if table.name == TIMING_TSV else "capacity"
    by_model: dict[str, dict[Decimal, str]] = {}
    shown: dict[str, str] = {}
    unknown = []
    for row in table.rows:
        if table.name == ATTEMPTS_TSV and row.name("purpose") != P_TIME:
            continue
        if not row.get(column):
            continue
        value = decimal_of(row.get(column))
        if value is None:
            unknown.append(f"{where(table, row)}: {column} {row.get(column)!r} is not a number")
            continue
        shown.setdefault(row.name("model"), row.get("model"))
        by_model.setdefault(row.name("model"), {})[value.normalize()] = row.get(column)
    bad = [f"{table.name}: {shown[model]} timed at {', '.join(sorted(caps.values()))}"
           for model, caps in sorted(by_model.items()) if len(caps) > 1]
    if not by_model and not unknown:
        return Check(MIXED_TIMING, NOT_APPLICABLE, [f"{table.name}: no timing rows"])
    return verdict_of(bad, [], MIXED_TIMING, unknown)


__all__ = ["cell_name", "cell_ns", "check_fabricated", "check_measure_validate",
           "check_mixed_timing", "check_natural", "check_unexecutable", "executable_row",
           "find_uniform_tokens", "is_echo"]


# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule, ...] = (
    Rule(NATURAL, "ECHO attempts with purpose=natural (old selection)",
         (Source(ATTEMPTS_TSV, ("backend", "purpose")),), True, check_natural,
         "the first campaign picked the lowest capacity with no observed loss"),
    Rule(NO_MEASURE_VALIDATE, "ECHO attempts lack purpose=measure or purpose=validate rows "
         "(the earlier layout; with the runbook as run the replay decides)",
         (Source(ATTEMPTS_TSV, ("model", "backend", "purpose")),), True, check_measure_validate,
         "selections that were never measured or never validated"),
    Rule(FABRICATED, "ECHO required_capacity exactly 1.0 for every model",
         (Source(SELECTION_TSV, ("backend", "required_capacity")),
          Source(ATTEMPTS_TSV, ("backend", "required_capacity"))), True, check_fabricated,
         "ECHO's requirement assumed 1.0 (setup_metadata), not measured"),
    Rule(UNEXECUTABLE, "a cell whose capacity is not executable for its shape",
         (Source(ATTEMPTS_TSV, ("capacity",)),), True, check_unexecutable,
         "1.02 at N = 65536: UltraEP died before iteration 0 (pad multiple 128)"),
    Rule(MIXED_TIMING, "one model's timing rows use different capacities across backends "
         "(the earlier layout; with the runbook as run the replay decides)",
         (Source(TIMING_TSV, ("model", "timing_capacity")),
          Source(ATTEMPTS_TSV, ("model", "purpose", "capacity"))), False, check_mixed_timing,
         "backends timed at their own capacities, so the comparison was not like for like"),
)
