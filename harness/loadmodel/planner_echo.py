"""ECHO's offloading planner on per-expert counts (numpy; follows Megatron-LM PR 2368).

Upstream: NVIDIA/Megatron-LM refs/pull/2368/head a2b16b8733bb4ced46880d6adee6f19124732991,
megatron/core/transformer/moe/offloading_planner.py (gen_intermediate, gen_assignment,
gen_assignment_for_approx_bp, approx_bin_packing_kernel, one_shot_greedy_assignment,
reclaim_spare_experts) and moe_layer.py (approx_bin_packing when one spare expert per rank,
one_shot_greedy otherwise). Re-expressed here, not copied; see docs/reference-backend.md.
"""

from __future__ import annotations

from collections import deque

import numpy as np


def spill_and_spare(counts: np.ndarray, home: np.ndarray, ep: int
                    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(spill per expert, spare room per rank, avg = total // ep, load per rank).

    Each rank keeps its smallest experts first: experts sorted by count (ties by id),
    cumulative sum minus avg, clipped at 0, differenced -> the part of each expert above avg.
    """
    load = np.bincount(home, weights=counts, minlength=ep).astype(np.int64)
    avg = int(load.sum()) // ep
    spare = np.clip(avg - load, 0, None)
    order = np.lexsort((np.arange(counts.size), counts, home))
    c = counts[order]
    before = (np.cumsum(load) - load)[home[order]]              # slots of earlier ranks
    over = np.clip(np.cumsum(c) - before - avg, 0, None)
    first = np.r_[True, home[order][1:] != home[order][:-1]]
    spill = np.empty_like(counts)
    spill[order] = over - np.where(first, 0, np.r_[0, over[:-1]])
    return spill, spare, avg, load


def _desc(values: np.ndarray) -> np.ndarray:
    """Indices sorting `values` descending, ties by ascending index (stable)."""
    return np.lexsort((np.arange(values.size), -values))


def one_shot_greedy(spill: np.ndarray, spare: np.ndarray, slots: int) -> np.ndarray:
    """assign[e, r]: spill chunks (largest first) laid over spare buckets (largest first);
    each bucket keeps only its `slots` largest overlapping chunks (one spare slot each)."""
    so, bo = _desc(spill), _desc(spare)
    c_end, b_end = np.cumsum(spill[so]), np.cumsum(spare[bo])
    lo = np.maximum((c_end - spill[so])[:, None], (b_end - spare[bo])[None, :])
    overlap = np.clip(np.minimum(c_end[:, None], b_end[None, :]) - lo, 0, None)
    keep = np.zeros_like(overlap)
    for col in range(overlap.shape[1]):
        rows = np.lexsort((np.arange(overlap.shape[0]), -overlap[:, col]))[:slots]
        keep[rows, col] = overlap[rows, col]
    assign = np.zeros_like(overlap)
    assign[np.ix_(so, bo)] = keep
    return assign


def approx_bin_packing(spill: np.ndarray, spare: np.ndarray, avg: int,
                       num_buckets: int = 8) -> np.ndarray:
    """assign[e, r] with one spare slot per rank: ranks by spare room (largest first) each
    take one chunk from the largest non-empty size class; a chunk's remainder re-enters the
    size class of its new size (classes of width avg // (num_buckets - 1))."""
    so, bo = _desc(spill), _desc(spare)
    m = int(avg)
    width = max(1, m // (num_buckets - 1) if num_buckets > 1 else m)
    remaining = spill.astype(np.int64).copy()

    def bucket_of(v: int) -> int:
        return 0 if v >= m else min(num_buckets - 1, max(0, (m - v) // width + 1))

    buckets = [deque() for _ in range(num_buckets)]
    for e in so:
        if remaining[e] > 0:
            buckets[bucket_of(int(remaining[e]))].append(int(e))
    assign = np.zeros((spill.size, spare.size), dtype=np.int64)
    current = 0
    for r in bo:
        room = int(spare[r])
        if room <= 0:
            break
        expert = -1
        for b in range(current, num_buckets):
            if buckets[b]:
                expert, current = buckets[b].popleft(), b
                break
            current = b + 1
        if expert < 0:
            break
        placed = min(int(remaining[expert]), room)
        assign[expert, r] = placed
        remaining[expert] -= placed
        if remaining[expert] > 0:
            buckets[bucket_of(int(remaining[expert]))].append(expert)
    return assign


def reclaim(assign: np.ndarray, home: np.ndarray, load: np.ndarray, avg: int,
            threshold_multiplier: float) -> np.ndarray:
    """Give back to each home rank its smallest offloads while it stays within
    avg * (1 + threshold_multiplier) (upstream reclaim_spare_experts)."""
    out = assign.copy()
    max_allowed = avg + threshold_multiplier * avg
    for r in range(load.size):
        rows, cols = np.nonzero(assign[home == r])
        rows = np.flatnonzero(home == r)[rows]
        vals = assign[rows, cols]
        order = np.lexsort((cols, rows, vals))
        room = max_allowed - (load[r] - vals.sum())
        back = int(np.searchsorted(np.cumsum(vals[order]), room, side="right"))
        out[rows[order[:back]], cols[order[:back]]] = 0
    return out


def echo_assignment(counts: np.ndarray, home: np.ndarray, ep: int, opts: dict) -> np.ndarray:
    """assign[e, r]: slots of expert e offloaded to an echo slot on rank r (0 at home)."""
    total_spares = opts["moe_num_echo_experts"]
    total_spares = ep if total_spares is None else int(total_spares)
    if total_spares % ep:
        raise ValueError(f"moe_num_echo_experts ({total_spares}) must be divisible by ep ({ep})")
    per_rank = total_spares // ep
    spill, spare, avg, load = spill_and_spare(counts, home, ep)
    if per_rank == 0 or not spill.any():
        return np.zeros((counts.size, ep), dtype=np.int64)
    algo = opts["echo_algorithm"]
    if algo == "auto":
        algo = "approx_bin_packing" if per_rank == 1 else "one_shot_greedy"
    if algo == "approx_bin_packing":
        if per_rank != 1:
            raise ValueError("approx_bin_packing supports one echo expert per rank "
                             f"(moe_num_echo_experts = ep), got {per_rank} per rank")
        assign = approx_bin_packing(spill, spare, avg, int(opts["num_buckets"]))
    else:
        assign = one_shot_greedy(spill, spare, per_rank)
    t = float(opts["threshold_multiplier"])
    return reclaim(assign, home, load, avg, t) if t > 0 else assign
