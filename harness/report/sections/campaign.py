"""Section "Campaign time": wall span vs busy time and the ETA error
(harness.results.events.campaign_stats)."""

from __future__ import annotations

from harness.report.inputs import Context, md_table
from harness.results.events import campaign_stats


def render(ctx: Context) -> list[str]:
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
