"""Per-layer load planners of the emulated libraries (pure numpy, no torch).

One call plans one layer of one micro-batch from the global per-expert slot counts:
`plan(personality, counts, home, ep, options)` returns quotas[e, r], the number of expert
e's (token, expert) slots delivered to rank r. Every plan conserves slots
(quotas.sum(1) == counts) and only uses ranks that host e or a replica of e. Used by the
reference dispatch (backends/reference/dispatch.py) and by `epcap forecast`.

Personalities (docs/reference-backend.md, "Load planners", names the upstream files):
- raw: no rebalancing, every slot goes to its expert's home rank (DeepEP, HybridEP, NCCL EP).
- echo: ECHO's offloading planner (Megatron-LM pull request 2368): spare "echo" slots per
  rank take the spill of hot experts; approximate bin packing with one spare slot per rank,
  one-shot greedy otherwise; optional threshold reclaim.
- ultraep: UltraEP v1.0's quota solver: replica quotas until max/mean <= 1 + eps.
- moonep: exact balance, every rank receives exactly mean load (redundant experts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .planner_echo import echo_assignment
from .planner_ultraep import ultraep_assignment

PERSONALITIES = ("raw", "echo", "ultraep", "moonep")
PLACEMENTS = ("contiguous", "round-robin")

# Typed planner options and their defaults (runbook `options:` of a reference backend).
OPTION_DEFAULTS: dict[str, dict[str, object]] = {
    "raw": {},
    "echo": {
        "moe_num_echo_experts": None,     # spare echo slots in all; None = ep (one per rank)
        "threshold_multiplier": 0.0,      # reclaim spares while load <= mean*(1+t); 0 = off
        "echo_algorithm": "auto",         # auto | approx_bin_packing | one_shot_greedy
        "num_buckets": 8,                 # approximate bin packing's size classes
    },
    "ultraep": {
        "eps": 0.01,                      # ULTRA_EP_QUOTA_ORACLE_EPS
        "min_tokens_per_replica": 1024,   # ULTRA_EP_QUOTA_MIN_TOKENS_PER_REPLICA
        "min_tokens_reference": 65536,    # mean load at which min_tokens applies (0 = no scaling)
        "redundant_per_rank": 2,          # NUM_REDUNDANT_EXPERTS_PER_RANK (UltraEP demo)
        "balance_threshold": 1.0,         # ULTRA_EP_BALANCE_THRESHOLD
        "allow_zero_master_quota": False,  # ULTRA_EP_QUOTA_ALLOW_ZERO_MASTER_QUOTA
    },
    "moonep": {},
}
_TYPES = {"moe_num_echo_experts": (int, type(None)), "threshold_multiplier": (float, int),
          "echo_algorithm": (str,), "num_buckets": (int,), "eps": (float, int),
          "min_tokens_per_replica": (int,), "min_tokens_reference": (int,),
          "redundant_per_rank": (int,), "balance_threshold": (float, int),
          "allow_zero_master_quota": (bool,)}


def planner_options(personality: str, options: Mapping | None = None) -> dict[str, object]:
    """The personality's planner options: defaults overlaid with `options` (checked)."""
    if personality not in PERSONALITIES:
        raise ValueError(f"unknown personality {personality!r}; expected one of "
                         f"{list(PERSONALITIES)}")
    out = dict(OPTION_DEFAULTS[personality])
    for key, val in (options or {}).items():
        if key not in out:
            raise ValueError(f"{personality} planner has no option {key!r}; known: "
                             f"{sorted(out)}")
        types = _TYPES[key]
        if isinstance(val, bool) and bool not in types or not isinstance(val, types):
            raise ValueError(f"{personality} option {key}: expected "
                             f"{'/'.join(t.__name__ for t in types)}, got {val!r}")
        out[key] = val
    if personality == "echo" and out["echo_algorithm"] not in (
            "auto", "approx_bin_packing", "one_shot_greedy"):
        raise ValueError(f"echo option echo_algorithm: {out['echo_algorithm']!r} is not "
                         "auto, approx_bin_packing or one_shot_greedy")
    for key in ("num_buckets", "min_tokens_per_replica"):
        if key in out and int(out[key]) < 1:
            raise ValueError(f"{personality} option {key}: must be >= 1")
    for key in ("threshold_multiplier", "eps", "redundant_per_rank", "min_tokens_reference"):
        if key in out and out[key] < 0:
            raise ValueError(f"{personality} option {key}: must be >= 0")
    return out


def home_ranks(num_experts: int, ep: int,
               placement: str | Sequence[int] = "contiguous") -> np.ndarray:
    """(E,) home rank of each expert: contiguous e // (E/ep), round-robin e % ep, or explicit."""
    if ep < 1 or num_experts < 1 or num_experts % ep:
        raise ValueError(f"experts ({num_experts}) must be a positive multiple of ep ({ep})")
    if isinstance(placement, str):
        if placement == "contiguous":
            return np.arange(num_experts, dtype=np.int64) // (num_experts // ep)
        if placement == "round-robin":
            return np.arange(num_experts, dtype=np.int64) % ep
        raise ValueError(f"placement {placement!r} is not one of {list(PLACEMENTS)} "
                         "or a list of ranks")
    home = np.asarray(placement, dtype=np.int64)
    if home.shape != (num_experts,) or home.min() < 0 or home.max() >= ep:
        raise ValueError(f"placement must list {num_experts} ranks in 0..{ep - 1}")
    return home


def demand(quotas: np.ndarray) -> np.ndarray:
    """(ep,) slots each rank receives: quotas.sum(0)."""
    return np.asarray(quotas, dtype=np.int64).sum(0)


def home_quotas(counts: np.ndarray, home: np.ndarray, ep: int) -> np.ndarray:
    """raw: every expert's slots at its home rank."""
    q = np.zeros((counts.shape[0], ep), dtype=np.int64)
    q[np.arange(counts.shape[0]), home] = counts
    return q


def moonep_quotas(counts: np.ndarray, home: np.ndarray, ep: int) -> np.ndarray:
    """Exact balance: experts in (home rank, expert) order; each rank keeps its first `mean`
    slots; the excess of over-loaded ranks is poured in that order into the free room of
    under-loaded ranks (rank order), as replicas of the hot experts. Needs sum % ep == 0."""
    total = int(counts.sum())
    if total % ep:
        raise ValueError(f"moonep needs the slot total ({total}) divisible by ep ({ep})")
    n = total // ep
    order = np.lexsort((np.arange(counts.shape[0]), home))
    seg = counts[order]
    load = np.bincount(home, weights=counts, minlength=ep).astype(np.int64)
    start_of_home = np.cumsum(load) - load
    p0 = np.cumsum(seg) - seg - start_of_home[home[order]]
    p1 = p0 + seg
    q = np.zeros((counts.shape[0], ep), dtype=np.int64)
    q[order, home[order]] = np.clip(np.minimum(p1, n) - p0, 0, None)
    excess_before = (np.cumsum(np.clip(load - n, 0, None)) - np.clip(load - n, 0, None))
    o0 = excess_before[home[order]] + np.maximum(p0, n) - n
    o1 = excess_before[home[order]] + np.maximum(p1, n) - n
    deficit = np.clip(n - load, 0, None)
    lo = np.cumsum(deficit) - deficit
    overlap = np.minimum(o1[:, None], (lo + deficit)[None, :]) - np.maximum(o0[:, None], lo[None, :])
    q[order] += np.clip(overlap, 0, None)
    return q


def plan(personality: str, counts: np.ndarray, home: np.ndarray, ep: int,
         options: Mapping | None = None) -> np.ndarray:
    """quotas (E, ep) int64 for one layer and micro-batch from per-expert counts (E,)."""
    opts = planner_options(personality, options)
    counts = np.asarray(counts, dtype=np.int64)
    home = np.asarray(home, dtype=np.int64)
    if counts.ndim != 1 or home.shape != counts.shape:
        raise ValueError(f"counts {counts.shape} and home {home.shape} must both be (E,)")
    if counts.size and counts.min() < 0:
        raise ValueError("counts must be non-negative")
    if personality == "raw":
        return home_quotas(counts, home, ep)
    if personality == "moonep":
        return moonep_quotas(counts, home, ep)
    if personality == "echo":
        assign = echo_assignment(counts, home, ep, opts)
    else:
        assign = ultraep_assignment(counts, home, ep, opts)
    q = assign.astype(np.int64)
    q[np.arange(counts.shape[0]), home] += counts - q.sum(1)
    return q


def source_split(src_counts: np.ndarray, quotas: np.ndarray) -> np.ndarray:
    """split[src, dst, e]: of source rank src's slots of expert e, how many go to dst.

    Expert e's slots in global order (source rank, then token) fill its destinations in
    ascending rank order, quotas[e, 0] slots to rank 0 first, then rank 1, ... (the same
    order as `slot_destinations`).
    """
    src_counts = np.asarray(src_counts, dtype=np.int64)
    s_end = np.cumsum(src_counts, 0)                   # (ep_src, E)
    s_start = s_end - src_counts
    d_end = np.cumsum(quotas, 1)                       # (E, ep_dst)
    d_start = d_end - quotas
    lo = np.maximum(s_start[:, None, :], d_start.T[None, :, :])
    hi = np.minimum(s_end[:, None, :], d_end.T[None, :, :])
    return np.clip(hi - lo, 0, None)


def slot_destinations(expert_of_slot: np.ndarray, quotas: np.ndarray) -> np.ndarray:
    """Destination rank of every slot, slots given in global order (source rank, token, k).

    Expert e's slots, taken in that order, go quotas[e, 0] to rank 0, then quotas[e, 1] to
    rank 1, and so on (ascending rank order, home and replicas alike).
    """
    ids = np.asarray(expert_of_slot, dtype=np.int64).reshape(-1)
    quotas = np.asarray(quotas, dtype=np.int64)
    experts, ep = quotas.shape
    counts = np.bincount(ids, minlength=experts)
    if not np.array_equal(counts, quotas.sum(1)):
        raise ValueError("quotas do not conserve the slots' per-expert counts")
    order = np.argsort(ids, kind="stable")
    pos = np.empty(ids.size, dtype=np.int64)
    pos[order] = np.arange(ids.size) - (np.cumsum(counts) - counts)[ids[order]]
    start = np.cumsum(counts) - counts                 # expert e's first global position
    flat = np.searchsorted(np.cumsum(quotas.ravel()), start[ids] + pos, side="right")
    return flat - ids * ep                             # (e, r) -> r


@dataclass(frozen=True)
class Planner:
    """One personality's balancing planner, bound to its name (what `epcap forecast` runs)."""

    personality: str

    def home_ranks(self, experts: int, ep: int, placement: str) -> np.ndarray:
        return home_ranks(experts, ep, placement)

    def plan(self, counts: np.ndarray, home: np.ndarray, ep: int,
             options: Mapping | None = None) -> np.ndarray:
        return plan(self.personality, counts, home, ep, options)

    def demand(self, quotas: np.ndarray) -> np.ndarray:
        return demand(quotas)

    def slot_destinations(self, expert_of_slot: np.ndarray, quotas: np.ndarray) -> np.ndarray:
        return slot_destinations(expert_of_slot, quotas)


def load_planner(personality: str) -> Planner:
    """The planner of one of PERSONALITIES (ValueError naming the choices for any other)."""
    if personality not in PERSONALITIES:
        raise ValueError(f"unknown personality {personality!r}; expected one of "
                         f"{', '.join(PERSONALITIES)}")
    return Planner(personality)
