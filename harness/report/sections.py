"""The sections of report.md, each built from the loaded Context (numbers as the TSV
strings unchanged; derived numbers labelled with their precision)."""

from __future__ import annotations

import json

from harness.audit import audit_target
from harness.grid.capacity import is_executable
from harness.report.inputs import (
    ATTEMPTS,
    COMPARISON,
    NEED_SELECTION,
    SELECTION,
    TIMING,
    Context,
    md_table,
    num,
)
from harness.results.events import campaign_stats
from harness.results.provenance import read_provenance_lines
from harness.timing import verdicts
from harness.vocab import FAILURE_CLASSES, TIMED_OK, Impl, Purpose, Status


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
            f"{ctx.pad[0]} == 0` with harness.grid.capacity (pad multiple {ctx.pad[0]}: "
            f"{ctx.pad[1]}).", ""]
    for name, alt in (("fig1_capacity.png", "Required vs selected capacity"),
                      ("fig2_overprovision.png", "Over-provisioning")):
        if name in ctx.figures:
            out += [f"![{alt}]({name})", ""]
    return out


def _grid_checker(ctx: Context):
    """A row -> 'yes'/'NO'/'' function: is the selected capacity on the recorded grid."""
    def check(r: dict[str, str]) -> str:
        if not r["selected_capacity"] or not r["uniform_tokens"]:
            return ""
        ok = is_executable(r["selected_capacity"], int(float(r["uniform_tokens"])), ctx.pad[0])
        return "yes" if ok else "NO"

    return check


def _timing_points(ctx: Context):
    """TimePoint records for figure 4, plus placeholders for pairs that did not fit untimed."""
    from harness.figures import TimePoint  # lazy: matplotlib is slow to import

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
        out += [ctx.missing("timing verdicts", f"{COMPARISON} not found (results from "
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
    """The docs/spec.md: audit rules verdict of this campaign (harness.audit.audit_target)."""
    out = ["## Audit verdict", ""]
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
    """Wall span vs busy time and the ETA error (harness.results.events.campaign_stats)."""
    out = ["## Campaign time", ""]
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
