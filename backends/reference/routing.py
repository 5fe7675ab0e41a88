"""Seeded, deterministic MoE routing (named workloads, harness/loadmodel/workloads.py).

Pure functions of (workload, seed, model, layer, iteration, rank): every rank, every test and
every re-run computes the same routing, so a test can recount demand independently of the
worker (workloads.rank_counts gives the same counts without building the ids).

Trace files (replay with --trace, record with --record-trace): harness/loadmodel/traces.py
and trace_io.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from harness.loadmodel.workloads import popularity, route_ids

ROUTER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Routing:
    """Top-k expert ids [S, K] (int64) and router weights [S, K] (router dtype)."""

    ids: torch.Tensor
    weights: torch.Tensor


def expert_popularity(seed: int, model: str, layer: int, experts: int, sigma: float,
                      workload=None, step: int = 0) -> torch.Tensor:
    """Expert popularity of the workload at (model, layer, step), sums to 1 (fp64); the
    default workload is lognormal(0, sigma) per (model, layer)."""
    return torch.from_numpy(popularity(workload, seed, model, layer, step, experts, sigma))


def route(seed: int, model: str, layer: int, iteration: int, rank: int, tokens: int,
          experts: int, topk: int, sigma: float, router_dtype: str = "fp32",
          workload=None, popularity_seed: int | None = None) -> Routing:
    """Top-k ids from the workload's per-rank slot counts; weights = softmax of the chosen
    experts' log popularity in the router dtype (the ids do not depend on it).

    `seed` draws the tokens' choices; `popularity_seed` (default `seed`) the model's expert
    popularity, so a held-out routing stream (another seed) keeps the same router.
    """
    ids = torch.from_numpy(route_ids(workload, seed, model, layer, iteration, rank, tokens,
                                     experts, topk, sigma, popularity_seed))
    pop_seed = seed if popularity_seed is None else popularity_seed
    pop = expert_popularity(pop_seed, model, layer, experts, sigma, workload, iteration)
    return Routing(ids=ids, weights=weights_for_ids(ids, pop, router_dtype))


def weights_for_ids(ids: torch.Tensor, popularity: torch.Tensor, router_dtype: str) -> torch.Tensor:
    """Router weights for replayed ids: softmax of the chosen experts' log popularity."""
    logits = torch.log(popularity.float())[ids]
    return torch.softmax(logits.to(ROUTER_DTYPES[router_dtype]), dim=-1)


def destination_counts(ids: torch.Tensor, experts: int, ep: int) -> torch.Tensor:
    """Slots one rank sends to each EP rank under contiguous placement (experts/ep per rank)."""
    per_rank = experts // ep
    return torch.bincount(ids.flatten() // per_rank, minlength=ep)


def demand_per_rank(routings: Iterable[torch.Tensor], experts: int, ep: int) -> torch.Tensor:
    """Slots each rank must receive, summed over the source ranks' top-k ids."""
    total = torch.zeros(ep, dtype=torch.int64)
    for ids in routings:
        total += destination_counts(ids, experts, ep)
    return total
