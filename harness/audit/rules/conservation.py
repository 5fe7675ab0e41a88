"""An invariant of the raw evidence that no honest run can break, whatever its tables say: a
forger who edits the rank logs and re-states every table consistently still breaks it.

Conservation (`conservation-broken`): the slots a dispatch moves are the slots its
ranks sent. Per (iteration, layer) of a cell's dispatch rows (the one pass of the
harness's own `telemetry.summary.summarize`, read once per cell by the audit's loader):
sum(actual_valid_recv) <= sum(expected_recv) (N = tokens x top-k sent by each rank), with
equality when no row of that (iteration, layer) is saturated; no row receives more than
its budget; every (iteration, layer) holds one row per rank of the cell (a run that died,
exit code not 0, may leave its last groups partial). Why it holds for every reference
personality (backends/reference/dispatch.py): a receiver's actual = min(demand, budget),
and the demands of all ranks are a partition of all slots sent (home placement, or the
planner's quotas, which split each expert's global count: redundant experts move slots,
never copy them), so sum(demand) = sum(N); clipping only lowers it.
"""

from __future__ import annotations

from harness.audit.model import Check, Rule, Source, Table, Upload, verdict_of
from harness.audit.rules.rederive import abandoned_cells
from harness.audit.vocab import CONSERVATION
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON


def exit_code(cell_json: dict | None) -> int | None:
    """cell.json launcher.exit_code as an int, else None."""
    launcher = (cell_json or {}).get("launcher")
    value = launcher.get("exit_code") if isinstance(launcher, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_conservation(table: Table, upload: Upload) -> Check:
    """Every cell's dispatch rows against the conservation laws (module docstring)."""
    bad, unknown, seen = [], [], 0
    for key, cell in sorted(upload.cells.items()):
        if cell.problem:
            continue                                   # missing-provenance says so
        if cell.logs_problem:
            unknown.append(f"{key}: {cell.logs_problem}")
            continue
        facts = cell.logs
        s = facts and (facts.summary or facts.plain)
        if s is None or not s.rows:
            continue
        seen += 1
        first_issue = s.invariant_issues[0] if s.invariant_issues else ""
        if s.over_budget_rows:
            bad.append(f"{key}: {s.over_budget_rows} dispatch row(s) with actual_valid_recv "
                       f"> budget")
        if s.unconserved_groups:
            bad.append(f"{key}: {s.unconserved_groups} of {s.dispatch_groups} (iteration, "
                       f"layer) groups break conservation, first {first_issue}")
        if s.partial_groups:
            code = exit_code(cell.cell_json)
            if code is None and cell.path in abandoned_cells(upload):
                continue        # its driver was killed mid-run (events and cell.json say so)
                                # and the request ran again: a killed run's last groups are
                                # partial, and its rows are no result
            if code is None:
                unknown.append(f"{key}: {s.partial_groups} (iteration, layer) groups lack or "
                               f"repeat a rank ({first_issue}) and {CELL_JSON} states no "
                               f"launcher.exit_code (a run that died may leave them)")
            elif code == 0:
                bad.append(f"{key}: {s.partial_groups} (iteration, layer) groups lack or "
                           f"repeat a rank in a run that exited 0, first {first_issue}")
    return verdict_of(bad, [f"{seen} cells' dispatch rows conserve slots"] if seen else [],
                      CONSERVATION, unknown)


__all__ = ["check_conservation", "exit_code"]

# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule, ...] = (
    Rule(CONSERVATION, "a cell's dispatch rows break slot conservation: per (iteration, "
         "layer) more slots received than sent, fewer with no row saturated, a row over its "
         "budget, or a rank missing or repeated",
         (Source(ATTEMPTS_TSV, ()),), False, check_conservation,
         "rank logs edited (one rank's actual_valid_recv raised) and every table re-stated "
         "to match"),
)
