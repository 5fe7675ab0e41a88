"""Section "Held-out validation and drop risk": per-step peaks and the risk in words.

Per model, a figure of the per-step peaks of the measure run and the accepted validate run
of each select backend with the selected budget drawn on it; per (model, backend), the
selection's risk columns (capacity_selection.tsv, docs/spec.md#tsv-columns) written as a sentence a
reader can act on. Figures come only from the cells' telemetry; a missing input is a stated
absence, never an invented value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput
from harness.grid.capacity import Grid
from harness.grid.heldout import TARGET_PEAK, parse_target, select_budget
from harness.grid.risk import no_fit_reason, percent
from harness.io.outdir import OutFile
from harness.io.yamldoc import read_doc
from harness.report.inputs import Context
from harness.results.layout import RUNBOOK_YAML
from harness.telemetry.steps import StepPeaks, step_peaks
from harness.vocab import DEFAULT_PAD_MULTIPLE, Purpose, Status

RISK_COLUMNS = ("validate_seed", "validate_steps", "validate_peak", "headroom",
                "drop_risk_95", "predicted_drop_risk", "predicted_drop_risk_hi", "held_out")


@dataclass(frozen=True)
class PairSteps:
    """The per-step peaks behind one selection row."""

    backend: str
    budget: int | None
    capacity: str
    measure: StepPeaks | None
    validate: StepPeaks | None


def _float(text: str) -> float | None:
    """A TSV number, or None for an empty cell."""
    try:
        return float(text) if text.strip() else None
    except ValueError:
        return None


def _frozen_capacity(results_dir: Path) -> dict:
    """The `capacity:` mapping of the frozen runbook.yaml ({} when absent or unreadable)."""
    path = results_dir / RUNBOOK_YAML
    if not path.is_file():
        return {}
    try:
        book = read_doc(path).data or {}       # the bounded YAML reader (harness.io)
    except BadInput:
        return {}
    capacity = book.get("capacity") if isinstance(book, dict) else None
    return capacity if isinstance(capacity, dict) else {}


def target_note(results_dir: Path, row: dict, steps: PairSteps | None) -> str | None:
    """With capacity.target {drop_risk: R}: how the pre-validation budget was chosen."""
    capacity = _frozen_capacity(results_dir)
    try:
        target = parse_target(capacity.get("target"))
    except BadInput:
        return None
    peak, n = _float(row.get("peak_actual_valid_recv", "")), _float(
        row.get("uniform_tokens", ""))
    if target == TARGET_PEAK or peak is None or n is None or steps is None:
        return None
    try:
        decimals = Grid.parse(capacity.get("grid", "exact")).decimals
    except ValueError:
        decimals = None
    pad = capacity.get("pad_multiple", DEFAULT_PAD_MULTIPLE)
    pad = pad if isinstance(pad, int) else DEFAULT_PAD_MULTIPLE
    return select_budget(target, int(peak), int(n), pad, decimals, steps.measure).note


def _cell_steps(results_dir: Path, cell_dir: str) -> StepPeaks | None:
    """Per-step peaks of one cell's rank logs, or None when it has none."""
    if not cell_dir:
        return None
    root = results_dir / cell_dir
    logs = sorted(root.glob("rank*.log")) or sorted(root.glob("*.log"))
    if not logs:
        return None
    steps = step_peaks(logs)         # every iteration is a step, as in the requirement
    return steps if steps.steps else None


def _last(rows: list[dict], model: str, backend: str, purpose: str,
          status: str | None = None) -> dict | None:
    """The highest attempt of a (model, backend, purpose), optionally with a given status."""
    picked = [r for r in rows if r["model"] == model and r["backend"] == backend
              and r["purpose"] == purpose and (status is None or r["status"] == status)]
    return max(picked, key=lambda r: int(r["attempt"] or 0)) if picked else None


def pair_steps(results_dir: Path, selection: list[dict], attempts: list[dict]) -> dict:
    """model -> [PairSteps] for every selection row (measure: its last ok attempt)."""
    out: dict[str, list[PairSteps]] = {}
    for row in selection:
        m, b = row["model"], row["backend"]
        meas = _last(attempts, m, b, Purpose.MEASURE, Status.OK)
        val = _last(attempts, m, b, Purpose.VALIDATE)
        budget = _float(row.get("selected_budget_tokens", ""))
        out.setdefault(m, []).append(PairSteps(
            b, int(budget) if budget is not None else None, row.get("selected_capacity", ""),
            _cell_steps(results_dir, meas["cell_dir"]) if meas else None,
            _cell_steps(results_dir, val["cell_dir"]) if val else None))
    return out


def risk_sentence(row: dict, steps: PairSteps | None) -> str:
    """The selection's risk figures in words (values as written in the TSV, as percentages)."""
    cap = row.get("selected_capacity", "")
    if row.get("validated") != "true":
        return (f"not validated at {cap or 'any capacity'}: no drop-risk figures "
                "(the selection is not established)")
    n = row.get("validate_steps", "")
    fit = _fit_words(row, steps)
    if row.get("held_out") == "false":
        return (f"at {cap}, the validation re-ran the measured routing (validate.seed = the "
                f"campaign seed): its {n} steps are not held out, so no bound on unseen "
                f"steps is stated; {fit}")
    if not row.get("drop_risk_95"):
        return f"at {cap}: {n or 'no'} validate steps recorded, no held-out bound; {fit}"
    return (f"at {cap}, no drop in {n} held-out steps: per-step drop probability below "
            f"{percent(_float(row['drop_risk_95']))} at 95%; {fit}")


def _fit_words(row: dict, steps: PairSteps | None) -> str:
    """'the tail fit predicts X (≤ Y)' or why there is no fit."""
    value, high = _float(row.get("predicted_drop_risk", "")), _float(
        row.get("predicted_drop_risk_hi", ""))
    if value is not None and high is not None:
        if value == 0:
            return (f"the tail fit predicts 0%: the budget lies beyond the fitted tail's "
                    f"upper end (≤ {percent(high)} at 95%)")
        return f"the tail fit predicts {percent(value)} (≤ {percent(high)})"
    reason = "the per-step peaks are not available"
    if steps is not None and steps.measure is not None:
        pool = steps.measure.exact_peaks()
        if row.get("held_out") != "false" and steps.validate is not None:
            pool += steps.validate.exact_peaks()
        reason = no_fit_reason(pool) or "the fit was not recorded"
    return f"no tail fit ({reason})"


def render(ctx: Context) -> list[str]:
    """Markdown lines of the section; draws fig5_steps_<MODEL>.png into ctx.out (each drawn
    figure is appended to ctx.figures, each missing part recorded with ctx.missing)."""
    lines = ["## Held-out validation and drop risk", ""]
    selection = ctx.selection
    if selection is None or not selection.rows:
        return lines + [ctx.missing("drop risk", "no capacity_selection.tsv rows"), ""]
    if not all(selection.has(c) for c in RISK_COLUMNS):
        return lines + [ctx.missing("drop risk", "capacity_selection.tsv predates the risk "
                                    "columns (validate_seed .. held_out)"), ""]
    pairs = pair_steps(ctx.results_dir, selection.rows, ctx.attempts.rows if ctx.attempts else [])
    ctx.dest.remove_matching("fig5_steps_*.png")
    for model, items in pairs.items():
        lines += _model_lines(ctx, model, items)
    lines += ["A step is one iteration (all layers and ranks); its peak is the largest "
              "actual_valid_recv. `drop_risk_95` = 1 − 0.05^(1/n) for n held-out steps "
              "with no drop; the tail fit is a GEV fit (L-moments, bootstrap 95% interval) "
              "of the measure and validate steps: see docs/drop-risk.md.", ""]
    return lines


def _model_lines(ctx: Context, model: str, items: list[PairSteps]) -> list[str]:
    """One model's sentences (a line per selection row) and its figure of per-step peaks."""
    lines = [f"### {model}", ""]
    for row in (r for r in ctx.selection.rows if r["model"] == model):
        found = next((p for p in items if p.backend == row["backend"]), None)
        lines.append(f"- **{row['backend']}**: {risk_sentence(row, found)}.")
        note = target_note(ctx.results_dir, row, found)
        if note:
            lines.append(f"  Budget before validation: {note}.")
    name = f"fig5_steps_{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}.png"
    drawable = [p for p in items if p.measure or p.validate]
    if not drawable:
        lines += ["", ctx.missing(f"figure {name}", "no per-step peaks in the cells' logs")]
    else:
        try:
            plot_steps(model, drawable, ctx.dest / name)
            ctx.figures.append(name)
            lines += ["", f"![{model}: per-step peaks and the selected budget]({name})"]
        except Exception as exc:  # noqa: BLE001 - the sentences stand without the figure
            lines += ["", ctx.missing(f"figure {name}",
                                      f"drawing failed ({type(exc).__name__}: {exc})")]
    return lines + [""]


def plot_steps(model: str, items: list[PairSteps], path: Path | OutFile) -> None:
    """One panel per backend: per-step peaks of measure and validate, the budget as a line."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from harness.figures import save_png

    fig = Figure(figsize=(10.0, 1.2 + 1.6 * len(items)), layout="constrained")
    axes = fig.subplots(len(items), 1, squeeze=False)[:, 0]
    for ax, p in zip(axes, items, strict=True):
        for y, (label, steps, color) in enumerate(((str(Purpose.MEASURE), p.measure, "#1f77b4"),
                                                   (str(Purpose.VALIDATE), p.validate, "#d62728"))):
            if steps is None:
                continue
            xs = list(steps.peaks)
            jitter = [y + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(xs))]
            ax.scatter(xs, jitter, s=14, color=color, alpha=0.7,
                       label=f"{label}: {steps.steps} steps, peak {steps.peak}")
            sat = [(x, j) for x, j, s in zip(xs, jitter, steps.saturated, strict=True) if s]
            if sat:
                ax.scatter(*zip(*sat, strict=True), marker="x", s=30, color="black",
                           label="saturated step (peak = lower bound)")
        if p.budget is not None:
            ax.axvline(p.budget, color="black", lw=1.2, ls="--",
                       label=f"selected budget {p.budget} (capacity {p.capacity})")
        ax.set_yticks([0, 1], [str(Purpose.MEASURE), str(Purpose.VALIDATE)], fontsize=8)
        ax.set_ylim(-0.6, 1.6)
        ax.set_title(p.backend, fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    axes[-1].set_xlabel("per-step peak demand (slots)", fontsize=8)
    fig.suptitle(f"{model}: per-step peaks (measure vs held-out validate) and the selected "
                 "budget", fontsize=10)
    save_png(fig, path)
