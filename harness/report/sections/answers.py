"""Section "Answers": what an analyst asks first, per model, before any table: the selected
capacity, the buffer memory it saves against the old fixed capacity 2.00 (slots, and bytes
from the run's own model sizes), which library is faster by how much with what confidence
(or that the resolution cannot tell, or that the work was unequal), and which rows are the
emulation. Every figure is a TSV cell or a stated function of cells."""

from __future__ import annotations

from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.report.inputs import Context
from harness.timing.verdicts import is_control
from harness.vocab import Verdict

# The fixed capacity every run used before selection existed (the errata's campaigns, and
# the measure capacity of the shipped runbooks): the memory saved is counted against it.
OLD_CAPACITY = "2.00"
BUFFER_BYTES = 2 * 2    # dispatch + combine buffers, bf16 (loadmodel.memory `buffers` term)


def render(ctx: Context) -> list[str]:
    """One bullet per model: capacity and memory saved, speed, emulation."""
    out = ["## Answers", ""]
    models = list(dict.fromkeys(m for m, _ in ctx.pairs))
    if not models:
        return out + [ctx.missing("answers", "no rows in any TSV"), ""]
    hidden = _hidden_sizes(ctx)
    for model in models:
        out.append(f"- **{model}**: {_capacity(ctx, model, hidden.get(model))} "
                   f"{_speed(ctx, model)} {_impls(ctx, model)}")
    out += ["", "Memory: budget slots per rank = int(capacity × N) (grid.capacity."
            "budget_tokens, as the runs allocate them); bytes = slots × hidden × 2 buffers "
            "(dispatch, combine) × 2 bytes (bf16), the buffers term of the reference memory "
            "model (harness/loadmodel/memory.py). Speed: comparison.tsv against the "
            "baseline, dispatch phase; a verdict is stated only between arms that did "
            "equal work (docs/timing-verdicts.md#equal-work).", ""]
    return out


def _hidden_sizes(ctx: Context) -> dict[str, int]:
    """{model: hidden} from the runbook as run (runbook.yaml in the results); {} without it."""
    from harness.runbook.load import load_runbook

    path = ctx.results_dir / "runbook.yaml"
    if not path.is_file():
        return {}
    try:
        return {m.name: int(m.hidden) for m in load_runbook(path).models}
    except (BadInput, OSError, ValueError):
        return {}


def _capacity(ctx: Context, model: str, hidden: int | None) -> str:
    """'selected 1.0625 (echo, ultraep): 4096 → 2176 slots per rank against 2.00, 1920 saved
    (−46.9%), 491520 bytes'."""
    rows = [r for r in (ctx.selection.rows if ctx.selection else [])
            if r["model"] == model and r.get("selected_capacity")]
    if not rows:
        return "no capacity selected (see Capacity selection)."
    top = max(rows, key=lambda r: int(r["selected_budget_tokens"]))
    n, budget = int(top["uniform_tokens"]), int(top["selected_budget_tokens"])
    old = cap.budget_tokens(OLD_CAPACITY, n)
    saved = old - budget
    names = ", ".join(f"{r['backend']} {r['selected_capacity']}" for r in rows)
    change = f"{saved} saved" if saved >= 0 else f"{-saved} more"
    text = (f"selected capacity {top['selected_capacity']} ({names}): {old} → {budget} "
            f"slots per rank against {OLD_CAPACITY}, {change} ({-100 * saved / old:+.1f}%)")
    if hidden is None:
        return text + ", bytes UNKNOWN (no readable runbook.yaml: hidden size unknown)."
    word = "saved" if saved >= 0 else "more"
    return text + f", {abs(saved) * hidden * BUFFER_BYTES} bytes of buffers per rank {word}."


def _speed(ctx: Context, model: str) -> str:
    """The dispatch verdict of every arm against the baseline, in words."""
    rows = [r for r in (ctx.comparison.rows if ctx.comparison else [])
            if r["model"] == model and r.get("phase") == "dispatch"
            and not is_control(r["backend"])]
    if not rows:
        return "Speed: no comparison."
    words = [verdict_words(r) for r in rows]
    return f"Dispatch against {rows[0]['baseline']}: " + "; ".join(words) + "."


def verdict_words(r: dict) -> str:
    """One comparison row in words: a speed verdict with its ratio and CI, or why none."""
    v, arm = r.get("verdict"), r["backend"]
    if v in (Verdict.FASTER, Verdict.SLOWER):
        return (f"{arm} {v} ×{float(r['ratio_median']):.2f} (95% CI "
                f"{float(r['ci_low']):.2f}–{float(r['ci_high']):.2f})")
    if v == Verdict.INDISTINGUISHABLE:
        return f"{arm} indistinguishable (only differences over {_pct(r.get('mde'))} ruled out)"
    if v == Verdict.TOO_NOISY:
        return f"{arm}: the resolution cannot tell ({r.get('reason') or 'too noisy'})"
    if v == Verdict.UNEQUAL_WORK:
        return f"{arm}: no verdict, unequal work ({r.get('reason')})"
    return f"{arm}: not compared ({r.get('reason') or 'no paired launches'})"


def _pct(value: str | None) -> str:
    try:
        return f"{100 * float(value):.0f}%"
    except (TypeError, ValueError):
        return "an unknown size"


def _impls(ctx: Context, model: str) -> str:
    """'Emulation (reference): echo, ...; library code: mcore-alltoall (megatron-core).'"""
    impls: dict[str, list[str]] = {}
    for r in ctx.timing.rows if ctx.timing else []:
        if r["model"] == model and r.get("backend_impl"):
            impls.setdefault(r["backend_impl"], []).append(r["backend"])
    if not impls:
        return "Implementation: not recorded."
    emu = impls.pop("reference", [])
    parts = [f"Emulation (reference): {', '.join(emu)}"] if emu else []
    parts += [f"library code: {', '.join(names)} ({impl})" for impl, names in impls.items()]
    return "; ".join(parts) + "."
