"""UltraEP v1.0's quota-driven balancing on per-expert counts (numpy re-expression).

Upstream: Dots-Infra/UltraEP v1.0.0 (94cab099b44fffa99a82fea99e7c12d89cf65e4f),
csrc/kernels/placement.cu (warp_build_export_plan, warp_find_best_target, the fast
threshold oracle and the binary search of the quota kernel) and ultra_ep/config.py (defaults:
ULTRA_EP_QUOTA_ORACLE_EPS 0.01, ULTRA_EP_QUOTA_MIN_TOKENS_PER_REPLICA 1024,
ULTRA_EP_BALANCE_THRESHOLD 1.0). One NVLink domain = the whole EP group. Not copied code.
"""

from __future__ import annotations

import math

import numpy as np


def min_tokens(opts: dict, mean: float) -> int:
    """The replica floor: min_tokens_per_replica at mean load min_tokens_reference, scaled
    linearly with the mean load (1024 at 65536 slots per rank), at least 1."""
    base, ref = int(opts["min_tokens_per_replica"]), int(opts["min_tokens_reference"])
    return base if ref <= 0 else max(1, int(round(base * mean / ref)))


def export_plan(counts: np.ndarray, home: np.ndarray, load: np.ndarray, threshold: int,
                redundant: int, floor: int, allow_zero_master: bool,
                dynamic_floor: bool) -> np.ndarray | None:
    """assign[e, r] bringing every rank to <= threshold, or None when this oracle fails.

    Source ranks by load (largest first), their experts by load (largest first); each expert
    exports to the target with the most slack that has a free redundant slot and no copy of
    it yet, q = min(need, slack, available) >= floor (dynamic: ceil(need / usable targets)).
    """
    ep = load.size
    excess = np.clip(load - threshold, 0, None)
    slack = np.clip(threshold - load, 0, None)
    assign = np.zeros((counts.size, ep), dtype=np.int64)
    if excess.sum() == 0:
        return assign
    if excess.sum() > slack.sum():
        return None
    used = np.zeros(ep, dtype=np.int64)
    exported = np.zeros(counts.size, dtype=np.int64)
    running_slack = int(slack.sum())
    ranks = np.arange(ep)
    for src in np.lexsort((ranks, -load)):
        need = int(excess[src])
        if need <= 0:
            continue
        if need > running_slack:
            return None
        mine = np.flatnonzero(home == src)
        for e in mine[np.lexsort((mine, -counts[mine]))]:
            keep = 1 if (not allow_zero_master and counts[e] > 0) else 0
            available = max(int(counts[e]) - keep - int(exported[e]), 0)
            while need > 0 and available > 0:
                open_ = (slack > 0) & (used < redundant) & (assign[e] == 0) & (ranks != src)
                q = np.minimum(np.minimum(need, slack), available)
                need_floor = floor
                if dynamic_floor:
                    usable = int((open_ & (q > 0)).sum())
                    if usable == 0:
                        break
                    need_floor = max(1, -(-need // usable))
                ok = open_ & (q >= need_floor)
                if not ok.any():
                    break
                best = int(np.lexsort((ranks, -np.where(ok, slack, -1)))[0])
                take = int(q[best])
                assign[e, best] += take
                exported[e] += take
                slack[best] -= take
                used[best] += 1
                running_slack -= take
                need -= take
                available -= take
            if need == 0:
                break
        if need > 0:
            return None
    return assign


def ultraep_assignment(counts: np.ndarray, home: np.ndarray, ep: int, opts: dict) -> np.ndarray:
    """assign[e, r]: replica quotas that bring every rank's load to at most the smallest
    threshold found: first ceil(ceil(mean * bt) * (1 + eps)) (up to two steps of
    ceil(max/100) more), else a binary search between ceil(mean * bt) and the max load."""
    load = np.bincount(home, weights=counts, minlength=ep).astype(np.int64)
    redundant = int(opts["redundant_per_rank"])
    if redundant == 0 or ep <= 1 or load.sum() == 0:
        return np.zeros((counts.size, ep), dtype=np.int64)
    bt = max(float(opts["balance_threshold"]), 1.0)
    lo = int(math.ceil(np.float32(load.sum()) / np.float32(ep) * np.float32(bt)))
    hi = max(int(load.max()), lo)
    floor = min_tokens(opts, load.sum() / ep)
    zero = bool(opts["allow_zero_master_quota"])
    eps = np.float32(max(float(opts["eps"]), 0.0))
    fast = max(int(math.ceil(np.float32(lo) * (np.float32(1.0) + eps))), lo)
    step = max(1, (hi + 99) // 100)
    for _ in range(3):
        got = export_plan(counts, home, load, fast, redundant, floor, zero, True)
        if got is not None:
            return got
        fast = min(hi, fast + step)
    got = export_plan(counts, home, load, lo, redundant, floor, zero, False)
    if got is not None:
        return got
    lo_b, hi_b = lo + 1, hi
    while lo_b < hi_b:
        mid = (lo_b + hi_b) // 2
        if export_plan(counts, home, load, mid, redundant, floor, zero, False) is None:
            lo_b = mid + 1
        else:
            hi_b = mid
    got = export_plan(counts, home, load, lo_b, redundant, floor, zero, False)
    return got if got is not None else np.zeros((counts.size, ep), dtype=np.int64)
