"""Benchmark: is the predicted per-step drop risk calibrated? (reference routing only)

For the four zoo models at the default campaign's scaled shape (runbooks/local-cpu.yaml:
seq 256, ep 4, its layer counts, the zoo's experts, top-k and routing sigma), the per-step
peak is the largest raw receive demand over the step's MoE layers and EP ranks, recounted
from the reference routing's slot counts (`harness.loadmodel.workloads.layer_counts`, what
`routing.route` lays out as ids; contiguous placement, no rebalancing, no dispatch). One routing stream (seed SEED) per model: steps 0..W*FIT-1 are W independent
fitting windows of FIT steps each (a campaign's measure and validate steps); the next FRESH
steps are fresh steps, seen by no fit.

For each window, three budgets (slots, not restricted to the pad grid) around its peak:
peak - sd, peak, peak + sd (sd = standard deviation of the window's peaks). Each case
prints the predicted P(step peak > budget) with its bootstrap 95% interval
(harness.grid.risk.fit_risk on the window), the observed frequency over the fresh steps,
and, where the window had no drop at that budget, whether the frequency is above
drop_risk_95 = 1 - 0.05^(1/FIT). One window per model gives only 12 cases, too few to
judge an 80% coverage; W = 5 gives 60.

Targets (exit 1 when missed): observed frequency inside the predicted 95% interval in at
least 80% of the cases; observed frequency above drop_risk_95 in at most 5% of the cases
where drop_risk_95 applies.

    python tests/benchmarks/bench_drop_risk.py [--fresh 5000] [--fit 65] [--windows 5] [--seed 1234] [--jobs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

INSIDE_TARGET = 0.80
ABOVE_RULE_TARGET = 0.05


def step_peaks(model, shape, seed: int, first: int, count: int) -> list[int]:
    """Raw per-step peak demand (max over MoE layers and ranks) of steps first..first+count-1.

    The counts are the reference routing's own (workloads.layer_counts: the slot counts that
    routing.route lays out as ids, without building the ids); contiguous placement.
    """
    from harness.loadmodel.workloads import layer_counts

    tokens, ep = shape.seq * shape.micro_batch, shape.ep
    layers = range(model.first_dense_layers, model.layers)
    peaks = []
    for it in range(first, first + count):
        peak = 0
        for layer in layers:
            counts = layer_counts(None, seed, model.name, layer, it, ep, tokens, model.experts,
                                  model.topk, model.routing_sigma)
            demand = counts.sum(axis=0).reshape(ep, -1).sum(axis=1)
            peak = max(peak, int(demand.max()))
        peaks.append(peak)
    return peaks


def _model_steps(job: tuple) -> list[int]:
    """Worker of the process pool: the per-step peaks of one model's stream."""
    model, shape, seed, count = job
    import torch

    torch.set_num_threads(1)
    return step_peaks(model, shape, seed, 0, count)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh", type=int, default=5000)
    ap.add_argument("--fit", type=int, default=65)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runbook", default=str(ROOT / "runbooks" / "local-cpu.yaml"))
    args = ap.parse_args(argv)

    from harness.grid.risk import drop_risk_95, fit_risk, percent
    from harness.runbook.load import load_runbook

    rb = load_runbook(args.runbook)
    rule = drop_risk_95(args.fit)
    fitted = args.windows * args.fit
    print(f"shape seq={rb.shape.seq} mbs={rb.shape.micro_batch} ep={rb.shape.ep}; "
          f"{args.windows} windows of {args.fit} fitted steps, {args.fresh} fresh steps, "
          f"seed {args.seed}; drop_risk_95({args.fit}) = {percent(rule)}")
    t0 = time.monotonic()
    jobs = [(m, rb.shape, args.seed, fitted + args.fresh) for m in rb.models]
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) as pool:
        streams = pool.map(_model_steps, jobs)
    print(f"{'model':18} {'win':>3} {'budget':>7} {'fit_drops':>9} {'predicted':>10} "
          f"{'95% interval':>21} {'observed':>9} {'inside':>6} {'>rule':>6}")
    cases = inside = applicable = above = 0
    for model, stream in zip(rb.models, streams, strict=True):
        fresh = stream[fitted:]
        for w in range(args.windows):
            fit = stream[w * args.fit:(w + 1) * args.fit]
            risk = fit_risk(fit)
            if isinstance(risk, str):
                print(f"{model.name:18} {w:>3} no fit: {risk}")
                cases += 3
                continue
            peak, sd = max(fit), statistics.stdev(fit)
            for budget in (round(peak - sd), peak, round(peak + sd)):
                est = risk.at(budget)
                observed = sum(p > budget for p in fresh) / len(fresh)
                fit_drops = sum(p > budget for p in fit)
                ok = est.low <= observed <= est.high
                cases += 1
                inside += ok
                over = "-"
                if fit_drops == 0:
                    applicable += 1
                    above += observed > rule
                    over = "YES" if observed > rule else "no"
                print(f"{model.name:18} {w:>3} {budget:>7} {fit_drops:>9} "
                      f"{percent(est.value):>10} [{percent(est.low):>8}, {percent(est.high):>8}] "
                      f"{percent(observed):>9} {'yes' if ok else 'NO':>6} {over:>6}")
    inside_share = inside / cases if cases else 0.0
    above_share = above / applicable if applicable else 0.0
    print(f"inside the predicted 95% interval: {inside}/{cases} = {inside_share:.0%} "
          f"(target >= {INSIDE_TARGET:.0%})")
    print(f"observed above drop_risk_95: {above}/{applicable} = {above_share:.1%} "
          f"(target <= {ABOVE_RULE_TARGET:.0%})")
    print(f"wall {time.monotonic() - t0:.0f} s")
    missed = inside_share < INSIDE_TARGET or above_share > ABOVE_RULE_TARGET
    if missed:
        print("bench_drop_risk: target missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
