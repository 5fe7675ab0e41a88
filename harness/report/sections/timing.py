"""Section "Timing": the verdicts (with the A/A control's), the timing table against the
baseline (comparison.tsv's verdicts) and figure 4."""

from __future__ import annotations

from harness.report.inputs import COMPARISON, TIMING, Context, md_table
from harness.timing import verdicts


def render(ctx: Context) -> list[str]:
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
    keys = ["model", "backend"]
    # one logical table in parts a reader can follow: what ran, each phase's times, the
    # verdicts (parts of REPORT_WIDTH or less; a script joins them with narrow.read_tables)
    groups = [["status", "timing_capacity", "budget_tokens"]
              + [c for c in ("launches",) if t.has(c)]]
    for m in ("dispatch", "combine"):
        groups.append([c for c in (f"{m}_ms_p10", f"{m}_ms_median", f"{m}_ms_p90") if t.has(c)])
    parts = [md_table(keys + g, [[r[c] for c in keys + g] for r in t.rows]) for g in groups if g]
    verdict_head = [f"dispatch vs {baseline}", f"combine vs {baseline}"]
    parts.append(md_table(keys + verdict_head, [[r[c] for c in keys] + versus(r)
                                                for r in t.rows]))
    out += ["\n\n".join(parts), "",
            f"The `vs {baseline}` columns give the verdict and ratio only; the 95% CI and "
            "the reason of each are in the verdict list above.", ""]
    extra = ["model", "backend", "noise_floor_pct", "trials", "iters", "step_cv", "algbw_gbps",
             "peak_mem_bytes"]
    extra += [c for c in ("timer", "backend_impl") if t.has(c)] + ["cell_dir"]
    out += [md_table(extra, [[r[c] for c in extra] for r in t.rows]), ""]
    out += physical_lines(t)
    if not t.has("dispatch_ms_p10"):
        out += ["p10 columns not recorded in timing.tsv: whiskers run from the median to p90.",
                ""]
    out += ["Times in ms per call: median, p10 and p90 of all the pair's trial medians, "
            "pooled over its launches (timing_trials.tsv; the ratios above divide these "
            "medians: docs/timing-verdicts.md#definitions); with several launches "
            "noise_floor_pct is the launch-to-launch spread of the (dispatch + combine) "
            "launch medians, 100 × (max − min) / median. step_cv and algbw_gbps are the "
            "median of the launches' own values. The verdict columns are comparison.tsv's (above). "
            "cell_dir names the first launch; every launch is a purpose=time row of "
            "capacity_attempts.tsv. A pair that does not fit has no times: it is marked, never "
            "zero.", ""]
    if "fig4_timing.png" in ctx.figures:
        out += ["![Dispatch and combine timing](fig4_timing.png)", "",
                "Figure 4: bars are the arm medians; hollow dots the launch medians "
                "(independent process starts) and the shaded band their range (min to max): "
                "the run-to-run variance a verdict must beat.",
                ""]
    return out


PHYSICAL = ("copies", "dispatch_bytes_per_rank", "dispatch_local_bytes_per_rank",
            "dispatch_gbps", "combine_gbps", "gpu", "link_gbps", "link_nccl_gbps",
            "dispatch_link_fraction", "combine_link_fraction", "peak_mem_bytes",
            "peak_mem_source")


def physical_lines(t) -> list[str]:
    """The physical limit per arm (forks and public baselines side by side), or why not."""
    if not t.has("dispatch_bytes_per_rank"):
        return ["No bytes-moved columns in timing.tsv (results from before they were "
                "recorded): no physical limit shown.", ""]
    cols = ["model", "backend"] + [c for c in PHYSICAL if t.has(c)]
    notes = sorted({r.get("link_note", "") for r in t.rows if r.get("link_note")})
    return ["Bytes each rank moved and the link limit (docs/timing-verdicts.md#the-physical-"
            "limit): bytes per rank = the busiest rank's remote bytes in its busier direction "
            "(median over timed samples; local rows apart), GB/s = bytes / median time, "
            "fraction = GB/s / the declared per-direction limit of the GPU named. copies: "
            "per-expert (one row per (token, expert)) or per-rank (one per (token, "
            "destination rank), the deduplicating dispatchers).", "",
            md_table(cols, [[r.get(c, "") for c in cols] for r in t.rows]), ""] + \
        [f"- link: {n}" for n in notes] + ([""] if notes else [])


def _verdict_cells(ctx: Context, baseline: str):
    """Row -> [dispatch verdict, combine verdict] against the baseline (comparison.tsv)."""
    by_pair: dict[tuple[str, str], dict[str, str]] = {}
    for r in ctx.comparison.rows if ctx.comparison else []:
        by_pair.setdefault((r["model"], r["backend"]), {})[r["phase"]] = _short(r)

    def cells(r: dict[str, str]) -> list[str]:
        if r["backend"] == baseline:
            return ["baseline", "baseline"]
        got = by_pair.get((r["model"], r["backend"]))
        if got is None:
            why = "no comparison.tsv" if ctx.comparison is None else "no comparison row"
            return [f"n/a: {why}"] * 2
        return [got.get(phase, "n/a: no comparison row") for phase in verdicts.PHASES]

    return cells


def _short(row: dict[str, str]) -> str:
    """'slower ×1.215': the verdict and ratio of a comparison row; 'n/a' when there is none
    (the CI, the reason and why not are in the verdict list above)."""
    if not row.get("verdict"):
        return "n/a (see above)"
    ratio = row.get("ratio_median")
    return f"{row['verdict']} ×{float(ratio):.3f}" if ratio else row["verdict"]
