"""Benchmark (not a test): the `epcap forecast` core on a synthetic trace of >= 50 M slots.

A trace of 96 router calls (e.g. 12 steps x 8 MoE layers) of 65536 tokens (EP 8 x seq 8192)
x top-8 of 128 experts = 50.3 M (token, expert) slots, skewed (lognormal popularity, sigma
1.2), held as int16 arrays in memory (the JSON reader is not part of this figure: a trace
of this size is ~0.4 GB of text). Forecasts EP 8, 16, 32 and 64 (raw personality,
contiguous placement, slots) and times it against a bare `numpy.bincount` of the same expert
ids in the same run (best of three each). Prints slots/s, the ratio bincount time / forecast
time (target >= 0.5) and the process's peak RSS (target < 1 GB); exit 1 on a missed target.
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np

from harness.forecast.core import Forecaster, Setting, routing_from_calls
from harness.loadmodel import planners

EXPERTS, TOPK, TOKENS, CALLS, LAYERS = 128, 8, 65536, 96, 8
EPS = (8, 16, 32, 64)
TRIALS = 3


def synthetic_calls(seed: int = 0) -> list[tuple[int, np.ndarray]]:
    """(step, ids [TOKENS, TOPK] int16) per router call; ids distinct within each token."""
    rng = np.random.default_rng(seed)
    calls = []
    for c in range(CALLS):
        pop = rng.lognormal(0.0, 1.2, EXPERTS)
        first = rng.choice(EXPERTS, size=TOKENS, p=pop / pop.sum()).astype(np.int16)
        stride = (2 * rng.integers(0, EXPERTS // 2, size=TOKENS) + 1).astype(np.int16)
        ids = (first[:, None] + stride[:, None] * np.arange(TOPK, dtype=np.int16)) % EXPERTS
        calls.append((c // LAYERS, ids.astype(np.int16)))   # odd stride: K distinct experts
    return calls


def forecast_all(calls) -> list[dict]:
    """A fresh forecaster (nothing cached) for the four EP sizes."""
    routing = routing_from_calls("synthetic", EXPERTS, TOPK, calls)
    engine, planner = Forecaster(routing), planners.load_planner("raw")
    rows = []
    for ep in EPS:
        home = np.asarray(planner.home_ranks(EXPERTS, ep, "contiguous"))
        rows.append(engine.row(Setting(ep), home, planner))
    return rows


def main() -> int:
    t0 = time.perf_counter()
    calls = synthetic_calls()
    slots = sum(ids.size for _, ids in calls)
    print(f"generated {slots / 1e6:.1f} M slots ({CALLS} router calls x {TOKENS} tokens x "
          f"top-{TOPK} of {EXPERTS}) in {time.perf_counter() - t0:.1f} s")
    flat = np.concatenate([ids.reshape(-1) for _, ids in calls])
    fore, bare = [], []
    for _ in range(TRIALS):
        t = time.perf_counter()
        rows = forecast_all(calls)
        fore.append(time.perf_counter() - t)
        t = time.perf_counter()
        counts = np.bincount(flat, minlength=EXPERTS)
        bare.append(time.perf_counter() - t)
    assert int(counts.sum()) == slots
    f_s, b_s = min(fore), min(bare)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for r in rows:
        print(f"  EP {r['ep']:>3}: peak {r['peak_demand']:>7} of N = {r['uniform_tokens']:>6}"
              f"  required {r['required_capacity']:.4f}  selected {r['selected_capacity']}")
    ratio = b_s / f_s
    print(f"forecast, 4 EP sizes : {f_s:.3f} s  {slots / f_s / 1e6:8.1f} M slots/s")
    print(f"numpy.bincount       : {b_s:.3f} s  {slots / b_s / 1e6:8.1f} M slots/s")
    ok_ratio, ok_rss = ratio >= 0.5, rss < 1e9
    print(f"ratio bincount / forecast: {ratio:.2f} (target >= 0.5: "
          f"{'met' if ok_ratio else 'MISSED'})")
    print(f"peak RSS: {rss / 1e6:.0f} MB (target < 1 GB: {'met' if ok_rss else 'MISSED'})")
    return 0 if ok_ratio and ok_rss else 1


if __name__ == "__main__":
    sys.exit(main())
