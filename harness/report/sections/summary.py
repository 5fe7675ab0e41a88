"""Section "Summary": one narrow table first (at most ~100 characters a line, readable in
`less`): per model and backend the selected capacity, the timing capacity, the timing
status and dropped slots, the median dispatch and combine times and the comparison
verdicts. The wide tables come after it."""

from __future__ import annotations

from harness.report.inputs import Context, md_table
from harness.timing.verdicts import control_check
from harness.vocab import Verdict

# the verdicts in a word each (the legend under the table spells them out)
SHORT = {Verdict.FASTER: "faster", Verdict.SLOWER: "slower", Verdict.INDISTINGUISHABLE: "same",
         Verdict.TOO_NOISY: "noisy", Verdict.UNEQUAL_WORK: "unequal"}


def _ms(value: str | None) -> str:
    """A median in ms as the TSV wrote it, shortened to 3 decimals ('' when absent)."""
    try:
        return f"{float(value):.3f}" if value not in (None, "") else ""
    except ValueError:
        return ""


def render(ctx: Context) -> list[str]:
    """Per (model, backend): selected, timing capacity, medians per arm, verdicts."""
    sel = {(r["model"], r["backend"]): r for r in ctx.selection.rows} if ctx.selection else {}
    tim = {(r["model"], r["backend"]): r for r in ctx.timing.rows} if ctx.timing else {}
    verdicts: dict[tuple[str, str], dict[str, str]] = {}
    for r in ctx.comparison.rows if ctx.comparison else []:
        if r.get("verdict"):
            verdicts.setdefault((r["model"], r["backend"]), {})[r.get("phase") or "?"] = \
                SHORT.get(r["verdict"], r["verdict"])
    rows = []
    for pair in ctx.pairs:
        s, t = sel.get(pair, {}), tim.get(pair, {})
        fit = "DOES NOT FIT" if pair in ctx.dnf else ""
        rows.append([pair[0], pair[1], s.get("selected_capacity", ""),
                     t.get("timing_capacity", s.get("timing_capacity", "")),
                     t.get("status", ""), t.get("dropped_slots", ""),
                     _ms(t.get("dispatch_ms_median")), _ms(t.get("combine_ms_median")),
                     _verdict(verdicts.get(pair, {})) or fit])
    out = ["## Summary", ""]
    if not rows:
        return out + [ctx.missing("summary", "no rows in any TSV"), ""]
    out += control_banner(ctx)
    out += [md_table(["model", "backend", "selected", "timed at", "status", "dropped",
                      "disp ms", "comb ms", "verdict"], rows), "",
            "Capacities as multiples of the uniform share N; status: the timing status; "
            "dropped: slots",
            "its launches' buffers dropped (an arm that drops does less work: its verdict is",
            "`unequal`, never a speed word); disp/comb ms: the arm medians (the",
            "median of all trial medians over the timed launches, in milliseconds; the ratio a",
            "verdict states is theirs: docs/timing-verdicts.md#definitions); verdict against the",
            f"baseline {ctx.baseline or '(none)'}: one word when both phases agree, else "
            "d: dispatch, c: combine",
            "(same: indistinguishable, noisy: too_noisy, unequal: unequal_work). Wider tables "
            "follow.", ""]
    return out


def control_banner(ctx: Context) -> list[str]:
    """The A/A warning, where the verdicts first appear: the control arm not
    indistinguishable makes every verdict of the table unreliable."""
    rows = ctx.comparison.rows if ctx.comparison else []
    reliable, problems = control_check(rows)
    if reliable:
        return []
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3
                                       else "")
    return ["**The verdicts below are unreliable:** the A/A control (the baseline timed a "
            f"second time) did not come out indistinguishable ({shown}); see Timing.", ""]


def _verdict(by_phase: dict[str, str]) -> str:
    """'noisy' when both phases agree, else 'd:same c:noisy'."""
    if not by_phase:
        return ""
    if len(set(by_phase.values())) == 1:
        return next(iter(by_phase.values()))
    return " ".join(f"{phase[:1]}:{v}" for phase, v in sorted(by_phase.items(),
                                                              key=lambda kv: kv[0] != "dispatch"))
