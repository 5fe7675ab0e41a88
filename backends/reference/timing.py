"""Timing of dispatch and combine: per-rank samples -> slowest-rank steps -> one JSON line.

A sample is one (iteration, layer) dispatch or combine, after a barrier. The step time of a
sample is the slowest rank's (all_reduce MAX). Statistics over all timed samples:

- dispatch_ms_* / combine_ms_*: median, p10, p90 of step times (linear quantiles).
- step_cv: stdev / mean of (dispatch + combine) step times (population stdev).
- noise_floor_pct: trial-to-trial spread of the median step, 100 * (max - min) / median of
  the per-trial medians of (dispatch + combine); null with fewer than two trials.
- algbw_gbps = S * K * hidden * bytes_per_element / dispatch_ms_median (GB/s, 1e9 bytes).
"""

from __future__ import annotations

import statistics
import time

import torch


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile q in [0, 1] of a non-empty list."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class Stopwatch:
    """Start/stop intervals in ms: perf_counter on CPU, CUDA events on GPU (read lazily)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.timer = "cuda-events" if self.cuda else "perf_counter"
        self._pending: list = []

    def start(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, started) -> object:
        """An interval handle; `ms(handle)` reads it (syncs the CUDA events)."""
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return (started, ev)
        return (time.perf_counter() - started) * 1e3

    def ms(self, handle) -> float:
        if self.cuda:
            handle[1].synchronize()
            return float(handle[0].elapsed_time(handle[1]))
        return float(handle)


def step_times(local_ms: list[float], device: torch.device) -> list[float]:
    """Per-sample slowest-rank time: all_reduce MAX of this rank's samples."""
    import torch.distributed as dist

    t = torch.tensor(local_ms, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def summarize(dispatch: list[list[float]], combine: list[list[float]], iters: int, tokens: int,
              topk: int, hidden: int, bytes_per_element: int, timer: str) -> dict:
    """The [EPCAP_TIMING] object from per-trial lists of slowest-rank step times (ms)."""
    all_d = [x for t in dispatch for x in t]
    all_c = [x for t in combine for x in t]
    steps = [d + c for d, c in zip(all_d, all_c, strict=True)]
    trial_steps = [statistics.median([d + c for d, c in zip(td, tc, strict=True)])
                   for td, tc in zip(dispatch, combine, strict=True)]
    noise = None
    if len(trial_steps) >= 2:
        noise = 100.0 * (max(trial_steps) - min(trial_steps)) / statistics.median(trial_steps)
    d_med = quantile(all_d, 0.5)
    logical = tokens * topk * hidden * bytes_per_element
    return {
        "trials": len(dispatch), "iters": iters,
        "samples_per_trial": len(dispatch[0]) if dispatch else 0,
        "dispatch_ms_median": d_med, "dispatch_ms_p10": quantile(all_d, 0.1),
        "dispatch_ms_p90": quantile(all_d, 0.9),
        "combine_ms_median": quantile(all_c, 0.5), "combine_ms_p10": quantile(all_c, 0.1),
        "combine_ms_p90": quantile(all_c, 0.9),
        "step_cv": statistics.pstdev(steps) / statistics.mean(steps) if steps else None,
        "noise_floor_pct": noise,
        "algbw_gbps": logical / (d_med * 1e-3) / 1e9 if d_med > 0 else None,
        "algbw_formula": (f"S*K*hidden*bytes_per_element/dispatch_ms_median = {tokens}*{topk}*"
                          f"{hidden}*{bytes_per_element} bytes / dispatch time"),
        "timer": timer,
        "backend_impl": "reference",
        "per_trial": [{"dispatch_ms_median": statistics.median(td),
                       "combine_ms_median": statistics.median(tc)}
                      for td, tc in zip(dispatch, combine, strict=True)],
    }
