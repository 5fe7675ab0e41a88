"""Section "Capacity frontier": per model, what each rung around the selection costs.

From frontier.tsv (written only when the runbook asks `frontier: {rungs: k}`;
docs/frontier.md): per (backend, rung) the budget and its slack over the measured peak,
the rung's timed launch (status, dropped slots, medians, the launch's noise floor: the
timing resolution one launch has), its modelled or measured memory and the held-out drop
risk; and one figure per model, fig6_frontier_<MODEL>.png: the curve from "drops at p" to
"wastes x%". A campaign without a frontier gets no section.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.io.outdir import OutFile
from harness.loadmodel.memory import format_size
from harness.report.inputs import Context, md_table
from harness.results.layout import FRONTIER_TSV
from harness.vocab import Status

HEADERS = ["backend", "rung", "capacity", "budget", "slack", "launch", "dispatch ms",
           "combine ms", "noise floor", "memory", "held-out drops", "drop risk ≤ (95%)",
           "fit"]


def _f(text: str | None) -> float | None:
    try:
        return float(text) if text and text.strip() else None
    except ValueError:
        return None


def slack_words(over_provision: str | None) -> str:
    """budget / measured peak in words: 'wastes 10.9%' or 'short 1.4%' (empty: '—')."""
    value = _f(over_provision)
    if value is None:
        return "—"
    return f"wastes {100 * (value - 1):.1f}%" if value >= 1 else f"short {100 * (1 - value):.1f}%"


def _ms(row: dict, phase: str) -> str:
    med, lo, hi = (_f(row.get(f"{phase}_ms_{q}")) for q in ("median", "p10", "p90"))
    if med is None:
        return "—"
    return f"{med:.3f} ({lo:.3f}–{hi:.3f})" if lo is not None and hi is not None else f"{med:.3f}"


def _risk(row: dict) -> str:
    bound = _f(row.get("drop_risk_95"))
    return "—" if bound is None else f"{100 * bound:.3g}%"


def _fit(row: dict) -> str:
    value, high = _f(row.get("predicted_drop_risk")), _f(row.get("predicted_drop_risk_hi"))
    return "—" if value is None or high is None else f"{100 * value:.3g}% (≤ {100 * high:.3g}%)"


def table_row(row: dict) -> list[str]:
    """One frontier.tsv row as the section's table prints it (values as written)."""
    mem = _f(row.get("peak_mem_bytes"))
    steps, dropped = row.get("heldout_steps") or "", row.get("heldout_dropped_steps") or ""
    launch = row.get("status") or "—"
    if row.get("dropped_slots") not in (None, "", "0"):
        launch += f", {row['dropped_slots']} slots dropped"
    noise = _f(row.get("noise_floor_pct"))
    return [row["backend"], row["rung"] + (" (selected)" if row.get("selected") == "true" else ""),
            row["capacity"], row.get("budget_tokens") or "—", slack_words(row.get("over_provision")),
            launch, _ms(row, "dispatch"), _ms(row, "combine"),
            "—" if noise is None else f"{noise:.1f}%",
            "—" if mem is None else f"{format_size(mem)} ({row.get('peak_mem_source') or '?'})",
            f"{dropped}/{steps}" if steps else "—", _risk(row), _fit(row)]


def render(ctx: Context) -> list[str]:
    """Markdown lines of the section (none without frontier.tsv); draws one figure per model
    into ctx.out (each appended to ctx.figures, a failure recorded with ctx.missing)."""
    table = ctx.frontier
    if table is None:
        return []
    lines = ["## Capacity frontier", ""]
    if not table.rows:
        return lines + [ctx.missing("capacity frontier", f"{FRONTIER_TSV} has no rows"), ""]
    lines += ["Each rung is one timed launch at that capacity (docs/frontier.md). Slack is the "
              "budget over the measured peak; the noise floor is the launch's trial-to-trial "
              "spread, the resolution one launch has; held-out drops are the validate steps "
              "whose peak exceeds the budget, the bound their exact 95% upper bound on the "
              "per-step drop probability, the fit the selection's tail fit at that budget.", ""]
    ctx.dest.remove_matching("fig6_frontier_*.png")
    models = list(dict.fromkeys(r["model"] for r in table.rows))
    for model in models:
        rows = [r for r in table.rows if r["model"] == model]
        lines += [f"### {model}", "", md_table(HEADERS, [table_row(r) for r in rows], keys=2), ""]
        name = f"fig6_frontier_{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}.png"
        try:
            plot_frontier(model, rows, ctx.dest / name)
            ctx.figures.append(name)
            lines += [f"![{model}: time and drop risk against capacity]({name})", ""]
        except Exception as exc:  # noqa: BLE001 - the table stands without the figure
            lines += [ctx.missing(f"figure {name}", f"drawing failed ({type(exc).__name__}: "
                                  f"{exc})"), ""]
    return lines


def plot_frontier(model: str, rows: list[dict], path: Path | OutFile) -> None:
    """Two panels against capacity, one line per backend: dispatch time (median, p10-p90
    bars) and the held-out drop bound with the fit; each rung labelled with its slack."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from harness.figures import save_png

    fig = Figure(figsize=(10.0, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    noise = [v for r in rows if (v := _f(r.get("noise_floor_pct"))) is not None]
    for i, backend in enumerate(dict.fromkeys(r["backend"] for r in rows)):
        color = f"C{i % 10}"                       # one colour per backend in both panels
        mine = [r for r in rows if r["backend"] == backend]
        xs = [float(r["capacity"]) for r in mine]
        med = [_f(r.get("dispatch_ms_median")) for r in mine]
        timed = [(x, m, _f(r.get("dispatch_ms_p10")), _f(r.get("dispatch_ms_p90")), r)
                 for x, m, r in zip(xs, med, mine, strict=True) if m is not None]
        if timed:
            err = [[m - (lo if lo is not None else m) for _, m, lo, _, _ in timed],
                   [(hi if hi is not None else m) - m for _, m, _, hi, _ in timed]]
            top.errorbar([t[0] for t in timed], [t[1] for t in timed], yerr=err,
                                marker="o", capsize=3, label=backend, color=color)
            for x, m, _, _, r in timed:
                top.annotate(slack_words(r.get("over_provision")) +
                             (f" ({Status.DROPS})" if r.get("status") == Status.DROPS else ""),
                             (x, m), fontsize=6, textcoords="offset points", xytext=(3, 4),
                             color=color)
        bound = [(x, b) for x, r in zip(xs, mine, strict=True)
                 if (b := _f(r.get("drop_risk_95"))) is not None]
        if bound:
            bottom.plot(*zip(*bound, strict=True), marker="s", color=color,
                        label=f"{backend}: held-out 95% bound")
        fit = [(x, v) for x, r in zip(xs, mine, strict=True)
               if (v := _f(r.get("predicted_drop_risk_hi"))) is not None]
        if fit:
            bottom.plot(*zip(*fit, strict=True), ls=":", marker=".", color=color,
                        label=f"{backend}: fit, 95% upper")
        for x, r in zip(xs, mine, strict=True):
            if r.get("selected") == "true":
                top.axvline(x, color="grey", lw=0.8, ls="--")
                bottom.axvline(x, color="grey", lw=0.8, ls="--")
    resolution = (f"one launch per rung; noise floor {min(noise):.1f}–{max(noise):.1f}%"
                  if noise else "one launch per rung; no noise floor stated")
    top.set_ylabel("dispatch ms (median, p10–p90)", fontsize=8)
    top.set_title(f"timing resolution: {resolution}", fontsize=8, loc="left")
    top.legend(fontsize=7)
    bottom.set_ylabel("per-step drop probability", fontsize=8)
    bottom.set_ylim(0, 1.05)
    bottom.set_xlabel("capacity (dashed: the validated selection)", fontsize=8)
    if bottom.lines:
        bottom.legend(fontsize=7)
    fig.suptitle(f"{model}: capacity frontier (time, slack and held-out drop risk per rung)",
                 fontsize=10)
    save_png(fig, path)
