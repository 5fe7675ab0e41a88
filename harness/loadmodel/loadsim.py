"""Required capacity from routing counts and the planners alone (numpy, no data movement).

`requirements(...)` replays the reference routing's per-expert counts (workloads.layer_counts,
the same counts the worker's routing produces) through each personality's planner, layer by
layer and step by step, and returns peak receive demand / N per personality. Seconds at the
Tier B shape; tests/benchmarks/bench_planners.py prints it for the zoo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from . import planners
from .workloads import layer_counts


@dataclass
class LoadResult:
    """Peak demand per personality over all (step, layer, rank), and per-step peaks."""

    n: int
    peak: dict[str, int]
    step_peaks: dict[str, list[int]] = field(default_factory=dict)

    def required(self, personality: str) -> float:
        """peak / N: the required capacity before rounding onto the grid."""
        return self.peak[personality] / self.n


def requirements(model: str, experts: int, topk: int, moe_layers: Iterable[int], seq: int,
                 ep: int, steps: int, sigma: float, seed: int = 1234,
                 routing: Mapping | str | None = None,
                 personalities: Iterable[str] = planners.PERSONALITIES,
                 options: Mapping[str, Mapping] | None = None,
                 placement: str = "contiguous") -> LoadResult:
    """Peak receive demand of each personality over `steps` steps and the given MoE layers."""
    home = planners.home_ranks(experts, ep, placement)
    names = list(personalities)
    step_peaks = {p: [0] * steps for p in names}
    layers = list(moe_layers)
    for step in range(steps):
        for layer in layers:
            counts = layer_counts(routing, seed, model, layer, step, ep, seq, experts, topk,
                                  sigma).sum(0)
            for p in names:
                q = planners.plan(p, counts, home, ep, (options or {}).get(p))
                step_peaks[p][step] = max(step_peaks[p][step], int(planners.demand(q).max()))
    return LoadResult(seq * topk, {p: max(v) for p, v in step_peaks.items()}, step_peaks)


def zoo_requirements(zoo: Mapping[str, Mapping], seq: int, ep: int, steps: int,
                     seed: int = 1234, options: Mapping[str, Mapping] | None = None
                     ) -> dict[str, LoadResult]:
    """requirements() for every model of a zoo mapping (models.yaml's `models:`)."""
    out = {}
    for name, m in zoo.items():
        first = int(m.get("first_dense_layers", 0))
        out[name] = requirements(name, int(m["experts"]), int(m["topk"]),
                                 range(first, int(m["layers"])), seq, ep, steps,
                                 float(m.get("routing_sigma", 1.0)), seed,
                                 m.get("routing"), options=options)
    return out


def imbalance(counts: np.ndarray, home: np.ndarray, ep: int) -> float:
    """Rank-level max/mean of home-placement load (the raw imbalance of one layer)."""
    load = np.bincount(home, weights=counts, minlength=ep)
    return float(load.max() / load.mean()) if load.sum() else 1.0
