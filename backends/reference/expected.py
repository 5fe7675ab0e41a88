"""The reference routing regenerated from a recorded argv, for the audit (`routing-not-from-seed`).

The very functions the worker routes with (workloads.layer_counts: row r is the
workloads.rank_counts that routing.route draws rank r's ids from) and plans with
(plans.layer_plan, plans.row_fields: dispatch.plan_from_counts and worker.RankRun.report),
driven by the worker's own parse of the flags. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.api.backend import ExpectedDispatch
from harness.loadmodel.workloads import layer_counts
from harness.vocab import phase_iterations

from .options import budget_of, model_seed_of, moe_layers, parse_recorded, tokens_of
from .personalities import personality
from .plans import layer_plan, row_fields


class ReferenceExpected(ExpectedDispatch):
    """One reference run's routing (RankRun.routing) and its rows (RankRun.report)."""

    def __init__(self, args) -> None:
        self.a = args
        self.p = personality(args.personality)
        self.ranks, self.experts = args.ep, args.experts
        self.tokens, self.budget = tokens_of(args), budget_of(args)
        self.iterations = tuple(range(phase_iterations(args, args.timed)))
        self.layers = tuple(moe_layers(args))
        self.seeded = args.trace is None
        self.model_seed = model_seed_of(args)
        self.seed_text = f"--seed {args.seed}" + (f" --model-seed {args.model_seed}"
                                                  if args.model_seed is not None else "")
        epcap = args.record_trace_format == "epcap"
        self.trace = args.record_trace if epcap and args.record_trace else None
        self.trace_header = {"experts": args.experts, "topk": args.topk,
                             "tokens": self.tokens, "ep": args.ep}

    def counts(self, iteration: int, layer: int) -> np.ndarray:
        a = self.a
        return layer_counts(a.routing, a.seed, a.model, layer, iteration, a.ep, self.tokens,
                            a.experts, a.topk, a.routing_sigma,
                            popularity_seed=self.model_seed)

    def rows(self, counts: np.ndarray) -> dict[int, dict[str, int]]:
        plan = layer_plan(counts, self.budget, self.p.planner, self.a.planner_options)
        return {r: row_fields(plan, r, self.budget, self.p.rebalances)
                for r in range(self.ranks)}


def expected_dispatch(argv: Sequence[str] | None) -> ReferenceExpected:
    """The regeneration of the run `argv` launched; ValueError naming why there is none."""
    if argv is None:
        raise ValueError("no argv recorded")
    argv = [str(a) for a in argv]
    if len(argv) < 3 or argv[1] != "-m" or argv[2] != __package__:
        raise ValueError(f"argv runs {' '.join(argv[1:3])!r}, not {__package__}'s worker")
    try:
        return ReferenceExpected(parse_recorded(argv[3:]))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"argv the reference worker here refuses ({exc})") from None


__all__ = ["ReferenceExpected", "expected_dispatch"]
