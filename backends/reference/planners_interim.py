"""Interim load planners with the interface of backends/reference/planners.py (issue 14).

Used by harness.registry.load_planner only while planners.py has not landed. They state
what the reference backend runs today: echo, ultraep and raw dispatch every slot to its home
rank (no rebalancing), moonep pours the excess of over-loaded ranks into the free room of
under-loaded ones so every rank receives the same share (backends/reference/dispatch.py,
moonep_plan, with one source). Pure numpy.
"""

from __future__ import annotations

import numpy as np

PERSONALITIES = ("raw", "echo", "ultraep", "moonep")


def home_ranks(num_experts: int, ep: int, placement: str = "contiguous") -> np.ndarray:
    """Home rank of each expert: contiguous blocks of E/ep, or round-robin (e mod ep)."""
    if num_experts % ep:
        raise ValueError(f"{num_experts} experts do not divide over {ep} ranks")
    e = np.arange(num_experts)
    if placement == "contiguous":
        return e // (num_experts // ep)
    if placement == "round-robin":
        return e % ep
    raise ValueError(f"unknown placement {placement!r}")


def plan(personality: str, counts: np.ndarray, home: np.ndarray, ep: int,
         options: dict | None = None) -> np.ndarray:
    """quotas[e, r]: slots of expert e that rank r receives (rows sum to counts)."""
    if personality not in PERSONALITIES:
        raise ValueError(f"unknown personality {personality!r}")
    counts = np.asarray(counts, dtype=np.int64)
    quotas = np.zeros((counts.size, ep), dtype=np.int64)
    quotas[np.arange(counts.size), home] = counts
    if personality != "moonep":
        return quotas
    return _balance(counts, home, ep)


def _balance(counts: np.ndarray, home: np.ndarray, ep: int) -> np.ndarray:
    """moonep: slots in (home rank, expert) order; each rank keeps its first n = ceil(total/ep),
    the excess flows, in that order, into the deficits of the other ranks in rank order."""
    n = -(-int(counts.sum()) // ep)
    order = np.lexsort((np.arange(counts.size), home))
    seg = counts[order]
    seg_home = home[order]
    load = np.bincount(home, weights=counts, minlength=ep).astype(np.int64)
    start_of_home = np.cumsum(load) - load
    p0 = np.cumsum(seg) - seg - start_of_home[seg_home]
    p1 = p0 + seg
    quotas = np.zeros((counts.size, ep), dtype=np.int64)
    quotas[order, seg_home] = np.clip(np.minimum(p1, n) - p0, 0, None)
    excess = np.clip(load - n, 0, None)
    excess_before = (np.cumsum(excess) - excess)[seg_home]
    o0 = excess_before + np.maximum(p0, n) - n
    o1 = excess_before + np.maximum(p1, n) - n
    deficit = np.clip(n - load, 0, None)
    lo = np.cumsum(deficit) - deficit
    hi = lo + deficit
    overlap = np.clip(np.minimum(o1[:, None], hi[None, :]) - np.maximum(o0[:, None], lo[None, :]),
                      0, None)
    quotas[order] += overlap
    return quotas


def demand(quotas: np.ndarray) -> np.ndarray:
    """Slots each rank receives."""
    return np.asarray(quotas).sum(axis=0)


def slot_destinations(expert_of_slot: np.ndarray, quotas: np.ndarray) -> np.ndarray:
    """Destination rank of each slot: the slots of an expert, in the order given, fill its
    quotas in rank order."""
    expert_of_slot = np.asarray(expert_of_slot, dtype=np.int64).ravel()
    experts, ep = quotas.shape
    cum = np.cumsum(quotas, axis=1)
    order = np.argsort(expert_of_slot, kind="stable")
    sorted_e = expert_of_slot[order]
    first = np.searchsorted(sorted_e, np.arange(experts))
    pos = np.arange(sorted_e.size) - first[sorted_e]
    dest = np.empty_like(expert_of_slot)
    dest[order] = np.minimum((pos[:, None] >= cum[sorted_e]).sum(axis=1), ep - 1)
    return dest
