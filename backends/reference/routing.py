"""Seeded, deterministic MoE routing (lognormal expert popularity + Gumbel top-k).

Pure functions of (seed, model, layer, iteration, rank): every rank, every test and every
re-run computes the same routing, so a test can recount demand independently of the worker.

Trace files (replay with --trace, record with --record-trace): backends/reference/traces.py
and trace_io.py.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch

ROUTER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Routing:
    """Top-k expert ids [S, K] (int64) and router weights [S, K] (router dtype)."""

    ids: torch.Tensor
    weights: torch.Tensor


def _seed(*parts: object) -> int:
    """A stable 63-bit seed from the parts (crc32 of their text, not Python's salted hash)."""
    text = "|".join(str(p) for p in parts).encode()
    return (zlib.crc32(text) << 31) ^ zlib.crc32(text[::-1])


def expert_popularity(seed: int, model: str, layer: int, experts: int, sigma: float) -> torch.Tensor:
    """Per-(model, layer) expert popularity, lognormal(0, sigma), normalised to sum 1 (fp64)."""
    gen = torch.Generator().manual_seed(_seed("pop", seed, model, layer))
    z = torch.randn(experts, generator=gen, dtype=torch.float64)
    pop = torch.exp(sigma * z)
    return pop / pop.sum()


def route(seed: int, model: str, layer: int, iteration: int, rank: int, tokens: int,
          experts: int, topk: int, sigma: float, router_dtype: str = "fp32") -> Routing:
    """Each token picks `topk` distinct experts by Gumbel top-k over log popularity."""
    if not 0 < topk <= experts:
        raise ValueError(f"topk {topk} must be in 1..experts ({experts})")
    logp = torch.log(expert_popularity(seed, model, layer, experts, sigma)).float()
    gen = torch.Generator().manual_seed(_seed("tok", seed, model, layer, iteration, rank))
    u = torch.rand(tokens, experts, generator=gen).clamp_(1e-12, 1.0 - 1e-7)
    scores = logp.unsqueeze(0) - torch.log(-torch.log(u))
    top, ids = torch.topk(scores, topk, dim=-1)
    weights = torch.softmax(top.to(ROUTER_DTYPES[router_dtype]), dim=-1)
    return Routing(ids=ids, weights=weights)


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
