"""Inputs of the report: the results directory's TSVs (strict), the recorded grid and
baseline, the Context every section renders from, and the small Markdown helpers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import BadInput
from harness.io.bounds import parse_int, parse_number, problem
from harness.io.outdir import OutDir
from harness.report.narrow import fit_table
from harness.results.facts import read_facts
from harness.results.layout import ATTEMPTS_TSV, COMPARISON_TSV, SELECTION_TSV, TIMING_TSV
from harness.results.tables import Table, read_table
from harness.vocab import DEFAULT_PAD_MULTIPLE, Purpose, Status

ATTEMPTS, SELECTION, TIMING = ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV
DEMAND_PURPOSES = (Purpose.MEASURE, Purpose.VALIDATE)
DEMAND_COLUMNS = ("run", "iteration", "layer", "rank", "actual_valid_recv", "budget",
                  "expected_recv")

# Columns each part reads (docs/spec.md: results layout); others present are shown or ignored.
NEED_ATTEMPTS = ("model", "backend", "purpose", "attempt", "capacity", "status", "cell_dir")
NEED_SELECTION = ("model", "backend", "required_capacity", "peak_actual_valid_recv",
                  "uniform_tokens", "measured_at_capacity", "selected_capacity",
                  "selected_budget_tokens", "over_provision", "validated",
                  "validate_attempts", "timing_capacity")
NEED_TIMING = ("model", "backend", "timing_capacity", "budget_tokens", "status", "trials",
               "iters", "dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median",
               "combine_ms_p90", "step_cv", "noise_floor_pct", "algbw_gbps",
               "peak_mem_bytes", "cell_dir")
NEED_COMPARISON = ("model", "backend", "baseline", "phase", "launches", "ratio_median",
                   "ci_low", "ci_high", "cv_backend", "cv_baseline", "verdict")
COMPARISON = COMPARISON_TSV
NEED_FRONTIER = ("model", "backend", "rung", "capacity", "budget_tokens", "selected",
                 "over_provision", "status")


# --------------------------------------------------------------------------- inputs


def read_tsv(path: Path, required: tuple[str, ...]) -> Table | None:
    """Read one of the campaign's TSVs strictly (harness.results.tables), its counts checked
    (check_counts); None when absent."""
    return check_counts(read_table(path, required))


def num(table: Table, i: int, column: str) -> float | None:
    """The float in row i's column; None for an empty cell or absent column; else BadInput."""
    text = table.rows[i].get(column, "").strip()
    if text == "":
        return None
    try:
        float(text)
    except ValueError as exc:       # the text is not quoted: a linked TSV may be anything
        raise BadInput(f"not a number ({len(text)} characters)", path=table.name,
                       line=table.lines[i], field=column) from exc
    try:                            # the one parser: NaN, inf (1e309), over 10**15 refused
        return parse_number(text)
    except ValueError:
        raise BadInput("not a finite number within range", path=table.name,
                       line=table.lines[i], field=column) from None


# counts the report prints as written: each an integer within bounds.RANGES (or GENERIC_MAX)
COUNT_COLUMNS = ("trials", "iters", "attempt", "budget_tokens", "uniform_tokens")
# measured numbers the report prints or draws: finite and within GENERIC_MAX (parse_number)
NUMBER_COLUMNS = ("dispatch_ms_median", "dispatch_ms_p90", "dispatch_ms_p10",
                  "combine_ms_median", "combine_ms_p90", "combine_ms_p10", "step_cv",
                  "noise_floor_pct", "algbw_gbps", "peak_mem_bytes", "required_capacity",
                  "over_provision", "ratio_median", "ci_low", "ci_high", "cv_backend",
                  "cv_baseline", "wall_s")


def check_counts(table: Table | None) -> Table | None:
    """`table` when every count column it has holds an integer in range and every number
    column a finite number in range (or nothing); BadInput naming file, line and field
    otherwise (`trials: 1e9999` is not a count, `step_cv: 1e9999` not a number)."""
    if table is None:
        return None
    for column in (c for c in COUNT_COLUMNS if table.has(c)):
        for i, row in enumerate(table.rows):
            text = (row.get(column) or "").strip()
            if not text:
                continue
            value = parse_int(text)
            why = "not an integer" if value is None else problem(column, value)
            if why:
                raise BadInput(f"{why} ({len(text)} characters)" if value is None else why,
                               path=table.name, line=table.lines[i], field=column)
    for column in (c for c in NUMBER_COLUMNS if table.has(c)):
        for i in range(len(table.rows)):
            num(table, i, column)
    return table


def read_pad_multiple(results_dir: Path) -> tuple[int, str]:
    """(P, where from): the pad multiple the campaign recorded in campaign.json, else 128."""
    pad = read_facts(results_dir).pad_multiple
    if isinstance(pad, int) and not isinstance(pad, bool) and pad > 0:
        return pad, "campaign.json pad_multiple"
    return DEFAULT_PAD_MULTIPLE, "default (campaign.json does not record pad_multiple)"


def read_baseline(results_dir: Path, timing: Table | None) -> str | None:
    """The backend timings are compared with: recorded in campaign.json, else the first
    backend of timing.tsv (the runbook's first timed backend)."""
    recorded = read_facts(results_dir).baseline
    if isinstance(recorded, str) and recorded:
        return recorded
    return timing.rows[0]["backend"] if timing is not None and timing.rows else None


def cell_logs(cell_dir: Path) -> list[Path]:
    """The rank logs of one cell (rank<R>.log by rank; any *.log when there are none)."""
    logs = list(cell_dir.glob("rank*.log")) or list(cell_dir.glob("*.log"))

    def key(p: Path) -> tuple[int, str]:
        m = re.search(r"(\d+)", p.stem)
        return (int(m.group(1)) if m else -1, p.name)

    return sorted(logs, key=key)


# --------------------------------------------------------------------------- derived


def pair_order(tables: list[Table | None]) -> list[tuple[str, str]]:
    """Every (model, backend) pair seen in the TSVs, grouped by model (first-seen orders)."""
    seen: dict[tuple[str, str], None] = {}
    for t in tables:
        for r in t.rows if t else []:
            seen.setdefault((r["model"], r["backend"]), None)
    models = list(dict.fromkeys(m for m, _ in seen))
    backends = list(dict.fromkeys(b for _, b in seen))
    return sorted(seen, key=lambda p: (models.index(p[0]), backends.index(p[1])))


def not_fitting(attempts: Table | None, timing: Table | None) -> dict[tuple[str, str], list[str]]:
    """(model, backend) -> where it did not fit (attempt cells or the timing row)."""
    out: dict[tuple[str, str], list[str]] = {}
    for t, what in ((attempts, "attempt"), (timing, "timing row")):
        for r in t.rows if t else []:
            if r["status"] == Status.DOES_NOT_FIT:
                where = r.get("cell_dir") or what
                out.setdefault((r["model"], r["backend"]), []).append(f"{what}: {where}")
    return out


# --------------------------------------------------------------------------- markdown


def md_escape(text: str) -> str:
    """Make a cell safe for a Markdown table (pipes, newlines)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(headers: list[str], rows: list[list[str]], keys: int | None = None) -> str:
    """A Markdown table padded to column width, so it reads in a terminal too; wider than
    REPORT_WIDTH, it is split into narrower tables that repeat the `keys` leading columns
    (harness.report.narrow.fit_table)."""
    return "\n".join(fit_table([md_escape(h) for h in headers],
                               [[md_escape(c) for c in r] for r in rows], keys=keys))


def na(why: str) -> str:
    """The one line a missing part becomes."""
    return f"_not available: {why}_"


# --------------------------------------------------------------------------- context


@dataclass
class Context:
    """Everything the sections read, loaded once (harness.report.build.load_context); the
    demand fields and the figures drawn beforehand are filled by harness.report.demand."""

    results_dir: Path
    out: Path
    attempts: Table | None
    selection: Table | None
    timing: Table | None
    pairs: list[tuple[str, str]]
    dnf: dict[tuple[str, str], list[str]]
    pad: tuple[int, str] = (DEFAULT_PAD_MULTIPLE, "default")
    baseline: str | None = None
    comparison: Table | None = None
    max_cv: float | None = None
    frontier: Table | None = None   # frontier.tsv, only when the runbook asked for it
    demand_note: str = ""
    demand_figures: list[tuple[str, str]] = field(default_factory=list)  # (model, file)
    figures: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    dest: OutDir | None = None      # `out`, opened once: every file of the report goes through it

    def missing(self, part: str, why: str) -> str:
        """Record that a part could not be built and return its 'not available' line."""
        self.unavailable.append(f"{part}: {why}")
        return na(why)
