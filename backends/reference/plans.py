"""One layer's dispatch plan at the level of counts, for every rank at once (numpy, torch-free).

What the exchanged counts[src, expert] decide: the personality's quotas (harness/loadmodel/
planners.py), their split by source rank, what each receiver keeps of it under its budget
(source rank, then expert order), each rank's demand and home demand, and the fields of its
dispatch row. The worker's rebalancing plan (dispatch.plan_from_counts) takes its counts-level
part from here, and the audit's regeneration (expected.py) calls the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from harness.loadmodel import planners


@dataclass(frozen=True)
class LayerPlan:
    """The counts-level plan of one layer on every rank."""

    quotas: np.ndarray         # (E, ep): slots of expert e placed on rank r
    keep: np.ndarray           # (ep_src, ep_dst, E): slots kept after each receiver's budget
    demand: np.ndarray         # (ep,): slots routed to each rank after rebalancing
    pre_balance: np.ndarray    # (ep,): slots routed to each rank's home experts
    home: np.ndarray           # (E,): each expert's home rank


def clip_keep(split: np.ndarray, budget: int) -> np.ndarray:
    """keep[src, dst, e] of split[src, dst, e]: each receiver keeps its first `budget` slots in
    (source rank, expert) order."""
    src, dst, experts = split.shape
    by_dst = split.transpose(1, 0, 2).reshape(dst, src * experts)
    room = np.clip(budget - (np.cumsum(by_dst, 1) - by_dst), 0, None)
    return np.minimum(by_dst, room).reshape(dst, src, experts).transpose(1, 0, 2)


def layer_plan(counts: np.ndarray, budget: int, planner: str,
               options: Mapping | None = None) -> LayerPlan:
    """The plan of counts[src, expert] under `planner` (raw: every slot at home)."""
    c = np.asarray(counts, dtype=np.int64)
    ep, experts = c.shape
    home = planners.home_ranks(experts, ep)
    quotas = planners.plan(planner, c.sum(0), home, ep, options)
    keep = clip_keep(planners.source_split(c, quotas), budget)
    pre = np.zeros(ep, dtype=np.int64)
    np.add.at(pre, home, c.sum(0))
    return LayerPlan(quotas, keep, quotas.sum(0), pre, home)


def received(demand: int, budget: int) -> int:
    """Slots a receiver fills: its demand, clipped by its buffer (every personality)."""
    return min(int(demand), int(budget))


def redundant_experts(plan: LayerPlan, rank: int) -> int:
    """Experts of another home rank of which `rank` keeps (receives) any slot."""
    hosted = plan.keep[:, rank, :].sum(0) > 0
    return int((hosted & (plan.home != rank)).sum())


def row_fields(plan: LayerPlan, rank: int, budget: int, rebalances: bool) -> dict[str, int]:
    """The routing-determined fields of `rank`'s dispatch row (worker.RankRun.report)."""
    out = {"actual_valid_recv": received(plan.demand[rank], budget),
           "pre_balance_recv": int(plan.pre_balance[rank])}
    if rebalances:
        out["redundant_experts"] = redundant_experts(plan, rank)
    return out
