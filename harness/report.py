"""`epcap report`: a campaign's results as report.md, PNG figures and a tidy demand.tsv.

Reads only the results directory (SPEC section 4): the three TSVs, provenance.txt, the cells'
rank logs (through harness.telemetry), the campaign statistics (harness.events) and the audit
verdict (harness.audit). Numbers from the TSVs are printed as the TSV strings, unchanged;
derived numbers (percentages) are labelled as such with their precision. A part whose input or
module is missing becomes a "not available: <why>" line, never a crash or an invented value.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import verdicts
from harness.errors import BadInput
from harness.plan import Cell, parse_cell_name
from harness.provenance import read_provenance_lines
from harness.redact import redact_text
from harness.report_balance import balance_lines
from harness.results import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    DEFAULT_PAD_MULTIPLE,
    SELECTION_TSV,
    TIMING_TSV,
    Table,
    open_atomic,
    read_campaign_facts,
    read_table,
    write_text_atomic,
)
from harness.vocab import FAILURE_CLASSES, TIMED_OK, Impl, Purpose, Status

ATTEMPTS, SELECTION, TIMING = ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV
DEMAND_PURPOSES = (Purpose.MEASURE, Purpose.VALIDATE)
DEMAND_COLUMNS = ("run", "iteration", "layer", "rank", "actual_valid_recv", "budget",
                  "expected_recv")

# Columns each part reads (SPEC section 4); others present are shown or ignored.
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


# --------------------------------------------------------------------------- inputs


def read_tsv(path: Path, required: tuple[str, ...]) -> Table | None:
    """Read one of the campaign's TSVs strictly (harness.results); None when absent."""
    return read_table(path, required)


def num(table: Table, i: int, column: str) -> float | None:
    """The float in row i's column; None for an empty cell or absent column; else BadInput."""
    text = table.rows[i].get(column, "").strip()
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError as exc:       # the text is not quoted: a linked TSV may be anything
        raise BadInput(f"not a number ({len(text)} characters)", path=table.name,
                       line=table.lines[i], field=column) from exc
    if not math.isfinite(value):    # NaN or inf (1e309) is not a value a TSV should carry
        raise BadInput("not a finite number", path=table.name, line=table.lines[i],
                       field=column)
    return value


def read_pad_multiple(results_dir: Path) -> tuple[int, str]:
    """(P, where from): the pad multiple the campaign recorded in campaign.json, else 128."""
    pad = read_campaign_facts(results_dir).get("pad_multiple")
    if isinstance(pad, int) and not isinstance(pad, bool) and pad > 0:
        return pad, "campaign.json pad_multiple"
    return DEFAULT_PAD_MULTIPLE, "default (campaign.json does not record pad_multiple)"


def read_baseline(results_dir: Path, timing: Table | None) -> str | None:
    """The backend timings are compared with: recorded in campaign.json, else the first
    backend of timing.tsv (the runbook's first timed backend)."""
    recorded = read_campaign_facts(results_dir).get("baseline")
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


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table padded to column width, so it reads in a terminal too."""
    cells = [[md_escape(h) for h in headers]] + [[md_escape(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def na(why: str) -> str:
    """The one line a missing part becomes."""
    return f"_not available: {why}_"


# --------------------------------------------------------------------------- sections


@dataclass
class Context:
    """Everything the sections read, loaded once."""

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
    figures: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)

    def missing(self, part: str, why: str) -> str:
        """Record that a part could not be built and return its 'not available' line."""
        self.unavailable.append(f"{part}: {why}")
        return na(why)


def _impl_note(ctx: Context) -> list[str]:
    """State which rows are the torch.distributed emulation rather than the libraries."""
    impls: dict[str, set[str]] = {}
    recorded = False
    for t in (ctx.attempts, ctx.timing):
        if t and t.has("backend_impl"):
            recorded = True
            for r in t.rows:
                if r["backend_impl"]:
                    impls.setdefault(r["backend_impl"], set()).add(r["backend"])
    if not recorded or not impls:
        return ["> **backend_impl not recorded** in these TSVs: this report cannot tell whether "
                "the rows come from the real libraries or from the reference emulation."]
    lines = []
    if Impl.REFERENCE in impls:
        names = ", ".join(sorted(impls[Impl.REFERENCE], key=str.lower))
        lines.append(f"> **Emulation, not the libraries.** Rows with `backend_impl=reference` "
                     f"({names}) were produced by the torch.distributed reference emulation "
                     "(`backends/reference`), which imitates each library's capacity-bounded "
                     "dispatch. Their capacities and timings describe the emulation, not "
                     "ECHO, UltraEP or MoonEP.")
    others = sorted(k for k in impls if k != Impl.REFERENCE)
    if others:
        lines.append("> Rows with backend_impl " + ", ".join(f"`{k}`" for k in others)
                     + " come from the named library implementation.")
    return lines


def section_overview(ctx: Context) -> list[str]:
    """Every (model, backend) pair with its selection, timing status and fit."""
    sel = {(r["model"], r["backend"]): r for r in ctx.selection.rows} if ctx.selection else {}
    tim = {(r["model"], r["backend"]): r for r in ctx.timing.rows} if ctx.timing else {}
    rows = []
    for pair in ctx.pairs:
        s, t = sel.get(pair, {}), tim.get(pair, {})
        rows.append([pair[0], pair[1], s.get("selected_capacity", ""),
                     t.get("timing_capacity", s.get("timing_capacity", "")),
                     t.get("status", "no timing row"),
                     "DOES NOT FIT" if pair in ctx.dnf else ""])
    out = ["## Overview", ""]
    if not rows:
        return out + [ctx.missing("overview", "no rows in any TSV"), ""]
    out += [md_table(["model", "backend", "selected_capacity", "timing_capacity",
                      "timing status", "fit"], rows), "",
            "Empty cell = not applicable (e.g. a backend that is timed but not selected).", ""]
    return out


def section_selection(ctx: Context) -> list[str]:
    """The selection table (TSV strings verbatim) and figures 1 and 2."""
    out = ["## Capacity selection", ""]
    if ctx.selection is None:
        return out + [ctx.missing("selection", f"{SELECTION} not found (select stage not run)"), ""]
    on_grid = _grid_checker(ctx)
    cols = [c for c in NEED_SELECTION]
    rows = [[r[c] for c in cols] + [on_grid(r)] for r in ctx.selection.rows]
    out += [md_table(cols + ["executable (checked)"], rows), "",
            "Capacity = budget / (S·K) where S·K = `uniform_tokens` (N); budgets in (token, "
            "expert) slots. `over_provision` = selected budget / measured peak. "
            "`executable (checked)` re-checks `int(selected_capacity × N) % "
            f"{ctx.pad[0]} == 0` with harness.capacity (pad multiple {ctx.pad[0]}: "
            f"{ctx.pad[1]}).", ""]
    for name, alt in (("fig1_capacity.png", "Required vs selected capacity"),
                      ("fig2_overprovision.png", "Over-provisioning")):
        if name in ctx.figures:
            out += [f"![{alt}]({name})", ""]
    return out


def _grid_checker(ctx: Context):
    """A row -> 'yes'/'NO'/'' function using harness.capacity, or a stated absence."""
    try:
        from harness.capacity import is_executable
    except Exception as exc:  # noqa: BLE001 - any failure to import degrades this column
        why = f"harness.capacity not importable ({type(exc).__name__}: {exc})"
        ctx.missing("executable check", why)
        return lambda r: "n/a: harness.capacity missing"

    def check(r: dict[str, str]) -> str:
        if not r["selected_capacity"] or not r["uniform_tokens"]:
            return ""
        ok = is_executable(r["selected_capacity"], int(float(r["uniform_tokens"])), ctx.pad[0])
        return "yes" if ok else "NO"

    return check


def _timing_points(ctx: Context):
    """TimePoint records for figure 4, plus placeholders for pairs that did not fit untimed."""
    from harness.figures import TimePoint

    t = ctx.timing
    points, seen = [], set()
    for i, r in enumerate(t.rows if t else []):
        seen.add((r["model"], r["backend"]))
        trio = [tuple(num(t, i, f"{m}_ms_{q}") for q in ("p10", "median", "p90"))
                for m in ("dispatch", "combine")]
        points.append(TimePoint(r["model"], r["backend"], r["status"], trio[0], trio[1],
                                num(t, i, "noise_floor_pct"), r["timing_capacity"],
                                launch_medians(ctx, r["model"], r["backend"])))
    for pair in ctx.dnf:
        if pair not in seen:
            points.append(TimePoint(pair[0], pair[1], Status.DOES_NOT_FIT, (None,) * 3, (None,) * 3,
                                    None))
    return points


def launch_medians(ctx: Context, model: str, backend: str) -> tuple:
    """(dispatch, combine) median of each usable time launch of a pair, from its cell.json."""
    out = []
    for r in ctx.attempts.rows if ctx.attempts else []:
        if (r["model"], r["backend"], r["purpose"]) != (model, backend, Purpose.TIME) \
                or r["status"] not in TIMED_OK:
            continue
        try:
            doc = json.loads((ctx.results_dir / r["cell_dir"] / "cell.json").read_text())
        except (OSError, ValueError):
            continue
        timing = doc.get("timing") or {}
        out.append((timing.get("dispatch_ms_median"), timing.get("combine_ms_median")))
    return tuple(out)


def _verdict_cells(ctx: Context, baseline: str):
    """Row -> [dispatch verdict, combine verdict] against the baseline (comparison.tsv)."""
    by_pair: dict[tuple[str, str], dict[str, str]] = {}
    for r in ctx.comparison.rows if ctx.comparison else []:
        by_pair.setdefault((r["model"], r["backend"]), {})[r["phase"]] = verdicts.verdict_text(r)

    def cells(r: dict[str, str]) -> list[str]:
        if r["backend"] == baseline:
            return ["baseline", "baseline"]
        got = by_pair.get((r["model"], r["backend"]))
        if got is None:
            why = "no comparison.tsv" if ctx.comparison is None else "no comparison row"
            return [f"n/a: {why}"] * 2
        return [got.get(phase, "n/a: no comparison row") for phase in verdicts.PHASES]

    return cells


def section_timing(ctx: Context) -> list[str]:
    """The verdicts (with the A/A control's), the timing table against the baseline, figure 4."""
    out = ["## Timing", ""]
    t = ctx.timing
    if t is None:
        return out + [ctx.missing("timing", f"{TIMING} not found (time stage not run)"), ""]
    baseline = ctx.baseline or (t.rows[0]["backend"] if t.rows else "")
    if ctx.comparison is not None:
        out += verdicts.report_lines(ctx.comparison.rows, ctx.max_cv)
    else:
        out += [ctx.missing("timing verdicts", f"{COMPARISON_TSV} not found (results from "
                            "before timing launches: no verdicts)"), ""]
    versus = _verdict_cells(ctx, baseline)
    main = ["model", "backend", "status", "timing_capacity", "budget_tokens"]
    main += [c for c in ("launches",) if t.has(c)]
    for m in ("dispatch", "combine"):
        main += [c for c in (f"{m}_ms_p10", f"{m}_ms_median", f"{m}_ms_p90") if t.has(c)]
    main += ["noise_floor_pct"]
    rows = [[r[c] for c in main] + versus(r) for r in t.rows]
    out += [md_table(main + [f"dispatch vs {baseline}", f"combine vs {baseline}"], rows), ""]
    extra = ["model", "backend", "trials", "iters", "step_cv", "algbw_gbps", "peak_mem_bytes"]
    extra += [c for c in ("timer", "backend_impl") if t.has(c)] + ["cell_dir"]
    out += [md_table(extra, [[r[c] for c in extra] for r in t.rows]), ""]
    if not t.has("dispatch_ms_p10"):
        out += ["p10 columns not recorded in timing.tsv: whiskers run from the median to p90.",
                ""]
    out += ["Times in ms per call: each figure is the median over the pair's launches of "
            "that launch's own value (median, p10, p90); with several launches "
            "noise_floor_pct is the launch-to-launch spread of (dispatch + combine) medians, "
            "100 × (max − min) / median. The verdict columns are comparison.tsv's (above). "
            "cell_dir names the first launch; every launch is a purpose=time row of "
            "capacity_attempts.tsv. A pair that does not fit has no times: it is marked, never "
            "zero.", ""]
    if "fig4_timing.png" in ctx.figures:
        out += ["![Dispatch and combine timing](fig4_timing.png)", "",
                "Figure 4: hollow dots are the individual launches' medians (independent "
                "process starts): their spread is the run-to-run variance a verdict must beat.",
                ""]
    return out


def section_demand(ctx: Context, demand_note: str, demand_figs: list[tuple[str, str]]) -> list[str]:
    """Per-rank peak demand heatmaps and the demand.tsv pointer."""
    out = ["## Per-rank peak demand", "", demand_note, ""]
    for model, name in demand_figs:
        out += [f"![{model}: per-rank peak demand]({name})", ""]
    return out


def section_dnf(ctx: Context) -> list[str]:
    """Every (model, backend) pair that did not fit, with where it happened."""
    out = ["## Does not fit", ""]
    if not ctx.dnf:
        return out + ["No (model, backend) pair ran out of memory.", ""]
    rows = [[m, b, "; ".join(w)] for (m, b), w in ctx.dnf.items()]
    return out + [md_table(["model", "backend", "where"], rows), "",
                  "does_not_fit is data (out of memory for that pair), not an error.", ""]


def section_failures(ctx: Context) -> list[str]:
    """Attempt counts by status, failure classes first, with the cells of each failure."""
    out = ["## Failures by class", ""]
    a = ctx.attempts
    if a is None:
        return out + [ctx.missing("failures", f"{ATTEMPTS} not found"), ""]
    by: dict[str, list[dict[str, str]]] = {}
    for r in a.rows:
        by.setdefault(r["status"], []).append(r)
    rows = []
    for status in list(FAILURE_CLASSES) + sorted(set(by) - set(FAILURE_CLASSES)):
        cells = by.get(status, [])
        shown = ", ".join(r["cell_dir"] for r in cells[:6]) + (" …" if len(cells) > 6 else "")
        kind = "failure" if status in FAILURE_CLASSES else "outcome"
        rows.append([status, kind, str(len(cells)), shown if status in FAILURE_CLASSES else ""])
    out += [md_table(["status", "kind", "attempts", "cells"], rows), ""]
    if a.has("failure_line"):
        lines = [[r["cell_dir"], r["status"], r["failure_line"]] for r in a.rows
                 if r["status"] in FAILURE_CLASSES and r["failure_line"]]
        if lines:
            out += [md_table(["cell", "status", "matching log line"], lines), ""]
    return out + [f"From the `status` column of {ATTEMPTS} ({len(a.rows)} attempts).", ""]


def section_audit(ctx: Context) -> list[str]:
    """The SPEC section 6 verdict of this campaign (harness.audit.audit_target)."""
    out = ["## Audit verdict", ""]
    try:
        from harness.audit import audit_target
    except Exception as exc:  # noqa: BLE001 - a missing room degrades to a stated line
        return out + [ctx.missing("audit", f"harness.audit not importable ({type(exc).__name__}: {exc})"), ""]
    try:
        result = audit_target(ctx.results_dir)
    except Exception as exc:  # noqa: BLE001 - the report still stands without the audit
        return out + [ctx.missing("audit", f"audit_target failed ({type(exc).__name__}: {exc})"), ""]
    rows = []
    for up in getattr(result, "uploads", []) or []:
        reasons = _field(up, "reasons") or []
        ignored = _field(up, "ignored_cells") or []
        rows.append([str(_field(up, "path") or "."), str(_field(up, "verdict")),
                     ", ".join(map(str, reasons)) or "-", str(len(ignored))])
    summary = getattr(result, "summary", None) or {}
    if rows:
        out += [md_table(["upload", "verdict", "reasons", "ignored cells"], rows), ""]
    said = [f"- {w}" for up in getattr(result, "uploads", []) or []
            for w in [*(_field(up, "why") or []), *(f"note: {n}" for n in _field(up, "notes") or [])]]
    out += said + ([""] if said else [])
    out += ["Summary: " + (", ".join(f"{k} {v}" for k, v in summary.items()) or "none"), ""]
    return out


def _field(obj, key: str):
    """obj[key] for a dict, obj.key otherwise (the audit result may use either)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def section_provenance(ctx: Context) -> list[str]:
    """provenance.txt as a key/value table (values verbatim)."""
    out = ["## Provenance", ""]
    path = ctx.results_dir / "provenance.txt"
    if not path.is_file():
        return out + [ctx.missing("provenance", "provenance.txt not found"), ""]
    pairs = read_provenance_lines(path)
    return out + [md_table(["key", "value"], [[k, v] for k, v in pairs]), ""]


def section_campaign(ctx: Context) -> list[str]:
    """Wall span vs busy time and the ETA error (harness.events.campaign_stats)."""
    out = ["## Campaign time", ""]
    try:
        from harness.events import campaign_stats
    except Exception as exc:  # noqa: BLE001
        return out + [ctx.missing("campaign time", f"harness.events not importable ({type(exc).__name__}: {exc})"), ""]
    try:
        stats = campaign_stats(ctx.results_dir)
    except Exception as exc:  # noqa: BLE001
        return out + [ctx.missing("campaign time", f"campaign_stats failed ({type(exc).__name__}: {exc})"), ""]
    rows = [[k, _fmt(stats.get(k))] for k in ("stage", "runs_done", "runs_left", "wall_span_s",
                                               "busy_s", "eta_error")]
    for frac, value in (stats.get("eta_error_at") or {}).items():
        rows.append([f"eta_error at {frac} of runs", _fmt(value)])
    wall, busy = stats.get("wall_span_s"), stats.get("busy_s")
    if isinstance(wall, (int, float)) and isinstance(busy, (int, float)) and wall > 0:
        rows.append(["busy share (derived, 0.1%)", f"{busy / wall * 100:.1f}%"])
    fails = stats.get("failures_by_class") or {}
    rows.append(["failures_by_class", ", ".join(f"{k} {v}" for k, v in fails.items()) or "none"])
    out += [md_table(["quantity", "value"], rows), "",
            "wall_span_s: first start to last finish; busy_s: summed run time of the "
            "backend processes; eta_error: estimated / actual remaining time (1.0 = exact).", ""]
    if not stats.get("done"):
        out += ["The campaign was not marked done when this report was built (a report built "
                "as the last stage of `epcap run` precedes that mark): the ETA error exists "
                "only once the campaign is done; run `epcap report` on this directory again "
                "to fill it in.", ""]
    return out


def _fmt(value) -> str:
    """A stats value as text; None is 'not recorded'."""
    if value is None:
        return "not recorded"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------- demand


def demand_cells(results_dir: Path) -> list[Cell]:
    """Measure and validate cells present under cells/, ordered by model, backend, name."""
    root = results_dir / "cells"
    cells = [parse_cell_name(p.name) for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    picked = [c for c in cells if c and c.purpose in DEMAND_PURPOSES]
    return sorted(picked, key=lambda c: (c.model, c.backend, c.purpose, c.attempt, c.name))


def build_demand(ctx: Context):
    """Write demand.tsv; return (note line, {cell name: rows DataFrame} of measure cells)."""
    path = ctx.out / "demand.tsv"
    try:
        from harness.telemetry import rows_table
    except Exception as exc:  # noqa: BLE001
        if path.exists():
            path.unlink()
        why = f"harness.telemetry not importable ({type(exc).__name__}: {exc})"
        return ctx.missing("demand", why), {}
    cells = demand_cells(ctx.results_dir)
    measured = {}
    with open_atomic(path, "w") as fh:
        fh.write("\t".join(DEMAND_COLUMNS) + "\n")
        for c in cells:
            logs = cell_logs(ctx.results_dir / "cells" / c.name)
            df = rows_table(logs) if logs else None
            if df is None or len(df) == 0:
                continue
            df = df.rename(columns={"iter": "iteration"}).assign(run=c.name)
            df[list(DEMAND_COLUMNS)].to_csv(fh, sep="\t", header=False, index=False,
                                            lineterminator="\n")
            if c.purpose == Purpose.MEASURE:
                measured[c.name] = df
    note = (f"[`demand.tsv`](demand.tsv): one row per dispatch telemetry row of the "
            f"{len(cells)} measure and validate cells (columns: {', '.join(DEMAND_COLUMNS)}). "
            "Heatmaps: measure cells only; value = max over all iterations (no warmup skipped) "
            "of actual_valid_recv / expected_recv per (rank, layer).")
    if not cells:
        note = ctx.missing("demand", "no measure or validate cell directories under cells/")
    return note, measured


def demand_maps(measured: dict) -> dict[str, list]:
    """model -> DemandMap list built from the measure cells' rows."""
    from harness.figures import DemandMap

    out: dict[str, list] = {}
    for name, df in measured.items():
        cell = parse_cell_name(name)
        df = df[df["expected_recv"] > 0]          # a zero uniform share has no ratio
        if df.empty:
            continue
        d = df.assign(ratio=df["actual_valid_recv"] / df["expected_recv"],
                      sat=df["actual_valid_recv"] >= df["budget"])
        g = d.groupby(["rank", "layer"]).agg(ratio=("ratio", "max"), sat=("sat", "any"))
        ratio = g["ratio"].unstack("layer")
        sat = g["sat"].unstack("layer").reindex_like(ratio).fillna(False).astype(bool)
        budget_ratio = float((d["budget"] / d["expected_recv"]).max())
        out.setdefault(cell.model, []).append(DemandMap(
            name, cell.backend, [int(r) for r in ratio.index], [int(v) for v in ratio.columns],
            ratio.to_numpy(dtype=float), sat.to_numpy(dtype=bool), budget_ratio))
    return out


# --------------------------------------------------------------------------- figures


def _safe(name: str) -> str:
    """A model name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _draw(ctx: Context, name: str, plot, *args) -> bool:
    """Draw one figure; a plotting error becomes a stated missing part, not a lost report."""
    try:
        plot(*args)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - the tables still stand without this figure
        ctx.missing(f"figure {name}", f"drawing failed ({type(exc).__name__}: {exc})")
        return False
    ctx.figures.append(name)
    return True


def draw_figures(ctx: Context, measured: dict) -> list[tuple[str, str]]:
    """Draw every figure the inputs allow; return the demand figures as (model, file)."""
    from harness import figures as fg

    for old in ctx.out.glob("fig[1-4]_*.png"):
        old.unlink()
    colors = fg.backend_colors([b for _, b in ctx.pairs])
    if ctx.selection is not None and ctx.selection.rows:
        points = _cap_points(ctx.selection)
        _draw(ctx, "fig1_capacity.png", fg.plot_capacity, points,
              ctx.out / "fig1_capacity.png", ctx.pad[0], colors)
        _draw(ctx, "fig2_overprovision.png", fg.plot_overprovision, points,
              ctx.out / "fig2_overprovision.png", colors)
    tpoints = _timing_points(ctx)
    if tpoints:
        missing_p10 = ctx.timing is None or not ctx.timing.has("dispatch_ms_p10")
        _draw(ctx, "fig4_timing.png", fg.plot_timing, tpoints, ctx.out / "fig4_timing.png",
              missing_p10, colors)
    demand = []
    order = list(dict.fromkeys(m for m, _ in ctx.pairs))
    rank = {m: i for i, m in enumerate(order)}
    for model, maps in sorted(demand_maps(measured).items(),
                              key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])):
        name = f"fig3_demand_{_safe(model)}.png"
        if _draw(ctx, name, fg.plot_demand, model, maps, ctx.out / name):
            demand.append((model, name))
    return demand


def _cap_points(t: Table):
    """CapPoint records from the selection table."""
    from harness.figures import CapPoint

    pts = []
    for i, r in enumerate(t.rows):
        n = num(t, i, "uniform_tokens")
        pts.append(CapPoint(r["model"], r["backend"], int(n) if n else None,
                            num(t, i, "required_capacity"), num(t, i, "selected_capacity"),
                            num(t, i, "over_provision"), r["required_capacity"],
                            r["selected_capacity"]))
    return pts


# --------------------------------------------------------------------------- entry points


def load_context(results_dir: Path, out: Path) -> Context:
    """Read the TSVs; refuse a directory that holds no campaign results at all."""
    if not results_dir.is_dir():
        raise BadInput("not a directory", path=str(results_dir))
    known = [ATTEMPTS, SELECTION, TIMING, "events.jsonl", "provenance.txt"]
    if not any((results_dir / k).exists() for k in known):
        raise BadInput(f"not a campaign results directory: none of {', '.join(known)}",
                       path=str(results_dir))
    attempts = read_tsv(results_dir / ATTEMPTS, NEED_ATTEMPTS)
    selection = read_tsv(results_dir / SELECTION, NEED_SELECTION)
    timing = read_tsv(results_dir / TIMING, NEED_TIMING)
    pairs = pair_order([selection, timing, attempts])
    comparison = read_tsv(results_dir / COMPARISON_TSV, NEED_COMPARISON)
    max_cv = read_campaign_facts(results_dir).get("max_cv")
    return Context(results_dir, out, attempts, selection, timing, pairs,
                   not_fitting(attempts, timing), read_pad_multiple(results_dir),
                   read_baseline(results_dir, timing), comparison,
                   float(max_cv) if isinstance(max_cv, (int, float)) else None)


def _campaign_name(ctx: Context) -> str:
    """The campaign column of the first TSV row, else the directory name."""
    for t in (ctx.attempts, ctx.selection, ctx.timing):
        if t and t.rows and t.rows[0].get("campaign"):
            return t.rows[0]["campaign"]
    return ctx.results_dir.name


def _render(results_dir: Path, out: Path) -> Context:
    """Build everything into `out`; return the context (figures drawn, parts unavailable)."""
    ctx = load_context(results_dir, out)
    out.mkdir(parents=True, exist_ok=True)
    demand_note, measured = build_demand(ctx)
    demand_figs = draw_figures(ctx, measured)
    if not measured and not any(u.startswith("demand") for u in ctx.unavailable):
        demand_note += "\n\n" + ctx.missing("demand heatmaps", "no measure cell has telemetry rows")
    body = [f"# epcap report: {_campaign_name(ctx)}", "",
            f"Results: `{results_dir.name}/` · generated "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} · numbers in tables are "
            "the TSV strings unchanged unless a column says derived.", ""]
    body += _impl_note(ctx) + [""]
    body += section_overview(ctx) + section_selection(ctx) + balance_lines(results_dir)
    body += section_demand(ctx, demand_note, demand_figs)
    from harness.forecast_report import report_section
    body += report_section(ctx)
    body += section_timing(ctx) + section_dnf(ctx) + section_failures(ctx)
    body += section_audit(ctx) + section_provenance(ctx) + section_campaign(ctx)
    if ctx.unavailable:
        body += ["## Parts not available", ""] + [f"- {u}" for u in ctx.unavailable] + [""]
    # one redaction pass (harness.redact): a failure line or path may carry a token
    write_text_atomic(out / "report.md", redact_text("\n".join(body).rstrip() + "\n"))
    return ctx


def build_report(results_dir: Path, out: Path | None = None) -> Path:
    """Write report.md, figures and demand.tsv for a campaign; return the report.md path."""
    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / "report"
    _render(results_dir, out)
    return out / "report.md"


def cli_report(results_dir: str, out: str | None = None) -> int:
    """`epcap report RESULTS_DIR [--out DIR]`: build the report; say where, and what is missing."""
    results = Path(results_dir)
    target = Path(out) if out else results / "report"
    ctx = _render(results, target)
    print(f"report: {target / 'report.md'} ({len(ctx.figures)} figures)")
    for part in ctx.unavailable:
        print(f"  not available: {part}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_report(sys.argv[1]))
