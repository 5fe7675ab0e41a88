"""Named routing workloads: expert popularity, per-rank slot counts and top-k ids (numpy).

Everything is a pure function of (workload, seed, model, layer, step) -- plus the source
rank for one rank's counts -- so one logical workload is the same at any EP size, on every
rank, in every test, and in `epcap forecast` (counts without token-level routing).

A rank's S tokens pick K distinct experts each. Its per-expert slot counts are one
multinomial draw of S*K slots over the slot probabilities p_e = pi_e / K, where pi_e =
min(1, c * popularity_e) is the chance that a token picks e (c water-filled so sum pi = K;
no expert is picked twice by one token). The ids are then laid out from the counts:
expert-sorted slots fill the (S, K) table column by column (slot i -> token i % S, choice
i // S, so a token never repeats an expert), and a seeded permutation shuffles the tokens.

Workloads (modelled on Megatron-LM pull request 7488's W0-W7, benchmarks/moe/token_imbalance):
lognormal (default: popularity lognormal(0, sigma) per (model, layer)), balanced (exact
round-robin split), hot_expert_set, hot_rank, spread_hot_experts, rotating_hotspot, burst.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np

WORKLOADS = ("lognormal", "balanced", "hot_expert_set", "hot_rank", "spread_hot_experts",
             "rotating_hotspot", "burst")
PARAMS = {"workload": str, "sigma": float, "hot_experts": int, "hot_share": float,
          "period": int}
DEFAULTS = {"workload": "lognormal", "sigma": None, "hot_experts": None, "hot_share": 0.5,
            "period": 3}


def seed_of(*parts: object) -> int:
    """A stable 63-bit seed from the parts (crc32 of their text, not Python's salted hash)."""
    text = "|".join(str(p) for p in parts).encode()
    return (zlib.crc32(text) << 31) ^ zlib.crc32(text[::-1])


def workload_spec(spec: Mapping | str | None) -> dict:
    """A checked workload spec: {"workload": name, ...params} with defaults filled in."""
    spec = {"workload": spec} if isinstance(spec, str) else dict(spec or {})
    out = dict(DEFAULTS)
    for key, val in spec.items():
        if key not in PARAMS:
            raise ValueError(f"routing: unknown key {key!r}; known: {sorted(PARAMS)}")
        want = PARAMS[key]
        if val is not None and not (isinstance(val, want) or want is float and
                                    isinstance(val, int)) or isinstance(val, bool):
            raise ValueError(f"routing.{key}: expected {want.__name__}, got {val!r}")
        out[key] = val
    if out["workload"] not in WORKLOADS:
        raise ValueError(f"routing.workload: {out['workload']!r} is not one of {list(WORKLOADS)}")
    if not 0.0 < float(out["hot_share"]) < 1.0:
        raise ValueError("routing.hot_share: must be between 0 and 1")
    if int(out["period"]) < 1 or (out["hot_experts"] is not None and int(out["hot_experts"]) < 1):
        raise ValueError("routing.period and routing.hot_experts: must be >= 1")
    if out["sigma"] is not None and float(out["sigma"]) < 0:
        raise ValueError("routing.sigma: must be >= 0")
    return out


def _hot(pop_hot: np.ndarray, experts: int, share: float) -> np.ndarray:
    """Popularity where the experts in `pop_hot` share `share` of the picks equally."""
    pop = np.full(experts, (1.0 - share) / max(experts - pop_hot.size, 1))
    pop[pop_hot] = share / pop_hot.size
    return pop / pop.sum()


def popularity(spec: Mapping | str | None, seed: int, model: str, layer: int, step: int,
               experts: int, sigma: float = 1.0) -> np.ndarray:
    """(E,) expert popularity (sums to 1) of the workload at (model, layer, step)."""
    w = workload_spec(spec)
    name = w["workload"]
    hot_n = min(experts, int(w["hot_experts"] or max(1, experts // 16)))
    share = float(w["hot_share"])
    if name == "lognormal":
        s = float(sigma if w["sigma"] is None else w["sigma"])
        rng = np.random.default_rng(seed_of("pop", seed, model, layer))
        pop = np.exp(s * rng.standard_normal(experts))
        return pop / pop.sum()
    if name == "balanced":
        return np.full(experts, 1.0 / experts)
    if name == "hot_expert_set":
        rng = np.random.default_rng(seed_of("hot", seed, model, layer))
        return _hot(rng.permutation(experts)[:hot_n], experts, share)
    if name == "hot_rank":
        return _hot(np.arange(hot_n), experts, share)
    if name == "spread_hot_experts":
        return _hot(np.arange(hot_n) * (experts // hot_n), experts, share)
    if name == "rotating_hotspot":
        start = (step // int(w["period"])) * hot_n
        return _hot((start + np.arange(hot_n)) % experts, experts, share)
    # burst: balanced steps, and every `period + 1`-th step a hot expert set
    if step % (int(w["period"]) + 1) != int(w["period"]):
        return np.full(experts, 1.0 / experts)
    rng = np.random.default_rng(seed_of("burst", seed, model, layer, step))
    return _hot(rng.permutation(experts)[:hot_n], experts, share)


def slot_probabilities(pop: np.ndarray, topk: int) -> np.ndarray:
    """p_e = pi_e / K with pi_e = min(1, c * pop_e) water-filled to sum K."""
    pi = np.zeros_like(pop, dtype=np.float64)
    free = pop > 0
    target = float(topk)
    for _ in range(pop.size + 1):
        scale = target / pop[free].sum()
        pi[free] = pop[free] * scale
        capped = free & (pi >= 1.0)
        if not capped.any():
            break
        pi[capped] = 1.0
        target -= capped.sum()
        free &= ~capped
    return pi / pi.sum()


def _draw(p: np.ndarray, seed: int, model: str, layer: int, step: int, rank: int,
          tokens: int, topk: int) -> np.ndarray:
    """One rank's multinomial slot counts over p, capped at `tokens` per expert."""
    rng = np.random.default_rng(seed_of("cnt", seed, model, layer, step, rank))
    counts = rng.multinomial(tokens * topk, p).astype(np.int64)
    while counts.max() > tokens:
        surplus = int(np.clip(counts - tokens, 0, None).sum())
        counts = np.minimum(counts, tokens)
        room = (counts < tokens) * p
        counts += rng.multinomial(surplus, room / room.sum())
    return counts


def _balanced(experts: int, total: int, rank: int) -> np.ndarray:
    """An exact round-robin split of `total` slots (the remainder rotates with the rank)."""
    counts = np.full(experts, total // experts, dtype=np.int64)
    return counts + ((np.arange(experts) - rank * (total % experts)) % experts < total % experts)


def layer_counts(spec: Mapping | str | None, seed: int, model: str, layer: int, step: int,
                 ranks: int, tokens: int, experts: int, topk: int,
                 sigma: float = 1.0, popularity_seed: int | None = None) -> np.ndarray:
    """(ranks, E) slot counts of source ranks 0..ranks-1 at (layer, step); row r equals
    rank_counts(..., rank=r, ...) (the same draw; the probabilities computed once)."""
    if not 0 < topk <= experts:
        raise ValueError(f"topk {topk} must be in 1..experts ({experts})")
    if workload_spec(spec)["workload"] == "balanced":
        return np.stack([_balanced(experts, tokens * topk, r) for r in range(ranks)])
    pop_seed = seed if popularity_seed is None else popularity_seed
    p = slot_probabilities(popularity(spec, pop_seed, model, layer, step, experts, sigma), topk)
    return np.stack([_draw(p, seed, model, layer, step, r, tokens, topk) for r in range(ranks)])


def rank_counts(spec: Mapping | str | None, seed: int, model: str, layer: int, step: int,
                rank: int, tokens: int, experts: int, topk: int, sigma: float = 1.0,
                popularity_seed: int | None = None) -> np.ndarray:
    """(E,) int64 slots rank `rank` routes to each expert at (layer, step); sums to S*K,
    each <= S (a token picks an expert at most once). `popularity_seed` (default `seed`)
    seeds the popularity, `seed` the draw: another seed = held-out steps of one model."""
    if not 0 < topk <= experts:
        raise ValueError(f"topk {topk} must be in 1..experts ({experts})")
    if workload_spec(spec)["workload"] == "balanced":
        return _balanced(experts, tokens * topk, rank)
    pop_seed = seed if popularity_seed is None else popularity_seed
    p = slot_probabilities(popularity(spec, pop_seed, model, layer, step, experts, sigma), topk)
    return _draw(p, seed, model, layer, step, rank, tokens, topk)


def ids_from_counts(counts: np.ndarray, tokens: int, topk: int, seed: int) -> np.ndarray:
    """(S, K) int64 top-k ids with exactly `counts` slots per expert, distinct per token."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.sum() != tokens * topk or counts.max(initial=0) > tokens:
        raise ValueError("counts must sum to tokens*topk with none above tokens")
    slots = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    table = slots.reshape(topk, tokens).T                     # slot i -> (i % S, i // S)
    perm = np.random.default_rng(seed).permutation(tokens)
    return np.ascontiguousarray(table[perm])


def route_ids(spec: Mapping | str | None, seed: int, model: str, layer: int, step: int,
              rank: int, tokens: int, experts: int, topk: int, sigma: float = 1.0,
              popularity_seed: int | None = None) -> np.ndarray:
    """The (S, K) top-k ids of one rank at (layer, step) (popularity_seed: rank_counts)."""
    counts = rank_counts(spec, seed, model, layer, step, rank, tokens, experts, topk, sigma,
                         popularity_seed)
    return ids_from_counts(counts, tokens, topk, seed_of("tok", seed, model, layer, step, rank))
