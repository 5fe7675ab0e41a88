"""`epcap forecast` core (docs/spec.md#command-line, docs/forecast.md): the per-rank demand that recorded
routing puts on another EP size, micro-batch, placement and personality, and the capacity the
harness would select for it. Pure: arrays in, rows out (harness/forecast/cli.py does the I/O).

A step's global batch is fixed: at EP size ep its T tokens (source ranks in rank order) are
cut into dispatches of ep x S' tokens (one dispatch of the whole step by default), each split
into ep contiguous shares, the first (size mod ep) shares one token longer. Demand per rank
and dispatch is what the personality's planner sends there; the peak over the trace's steps
is rounded onto the executable grid exactly as a measured peak is (harness/grid/capacity.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.grid.risk import drop_risk_upper
from harness.vocab import DEFAULT_PAD_MULTIPLE

COLUMNS = ("source", "model", "ep", "micro_batch", "placement", "personality", "unit", "steps",
           "uniform_tokens", "peak_demand", "required_capacity", "selected_capacity",
           "selected_budget_tokens", "over_provision", "drop_risk_95", "buffer_bytes_per_rank")
UNITS = ("slots", "tokens")


@dataclass(frozen=True)
class Routing:
    """A trace as the forecast needs it: one global batch of ids [T, K] per (step, router)."""

    source: str
    experts: int
    topk: int
    tokens: int                                   # T, the same at every step
    calls: Iterable[tuple[int, np.ndarray]]       # (step, ids) per (step, router layer);
                                                  # a stream read once (forecast.cli)
    seq: int | None = None                        # sequence length (for --micro-batch)

    @property
    def steps(self) -> int:
        return len({step for step, _ in self.calls})


@dataclass(frozen=True)
class Setting:
    """One forecast row's configuration; `placement` names the home map passed with it."""

    ep: int
    micro_batch: int | None = None
    placement: str = "contiguous"
    personality: str = "raw"
    unit: str = "slots"


def share_bounds(total: int, parts: int) -> np.ndarray:
    """Offsets of `parts` contiguous shares of `total` tokens; the first total % parts shares
    hold one token more (numpy.array_split's rule)."""
    q, rem = divmod(total, parts)
    sizes = np.full(parts, q, dtype=np.int64)
    sizes[:rem] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def per_rank_tokens(total: int, ep: int, micro_batch: int | None, seq: int | None) -> int:
    """S': tokens one rank dispatches at once (the longest share when one dispatch per step)."""
    if micro_batch is None:
        return -(-total // ep)
    if seq is None:
        raise ValueError("a micro-batch needs the sequence length")
    return micro_batch * seq


def dispatch_bounds(total: int, ep: int, tokens: int, whole_step: bool) -> list[tuple[int, int]]:
    """Global token ranges of the step's dispatches (the last one may be short)."""
    if whole_step:
        return [(0, total)]
    size = ep * tokens
    return [(lo, min(lo + size, total)) for lo in range(0, total, size)]


def distinct_per_rank(dest: np.ndarray, ep: int) -> np.ndarray:
    """Tokens each rank receives when a token is sent once per rank: dest is [tokens, K]."""
    if dest.size == 0:
        return np.zeros(ep, dtype=np.int64)
    srt = np.sort(dest, axis=1)
    fresh = np.ones(srt.shape, dtype=bool)
    fresh[:, 1:] = srt[:, 1:] != srt[:, :-1]
    return np.bincount(srt[fresh], minlength=ep)


class Forecaster:
    """Forecast rows for one trace; per-dispatch expert counts are computed once and shared
    by every setting that cuts the steps the same way."""

    def __init__(self, routing: Routing, options: dict | None = None) -> None:
        self.r, self.options = routing, options
        self._counts: dict[tuple[int, int, int], np.ndarray] = {}

    def counts(self, call: int, lo: int, hi: int, ids: np.ndarray | None = None) -> np.ndarray:
        """Slots per expert of global tokens [lo, hi) of one router call (`ids`: its ids,
        when the calls are streamed)."""
        key = (call, lo, hi)
        got = self._counts.get(key)
        if got is None:
            ids = self.r.calls[call][1] if ids is None else ids
            got = np.bincount(ids[lo:hi].reshape(-1), minlength=self.r.experts)
            self._counts[key] = got
        return got

    def call_peak(self, s: Setting, home: np.ndarray, planner, call: int,
                  ids: np.ndarray) -> int:
        """Peak per-rank demand of one router call (over its dispatches and ranks)."""
        r = self.r
        tokens = per_rank_tokens(r.tokens, s.ep, s.micro_batch, r.seq)
        peak = 0
        for lo, hi in dispatch_bounds(r.tokens, s.ep, tokens, s.micro_batch is None):
            try:
                quotas = planner.plan(self.counts(call, lo, hi, ids), home, s.ep, self.options)
            except ValueError as exc:      # e.g. moonep: slots not divisible by ep
                raise BadInput(f"{s.personality} cannot plan EP {s.ep}: {exc}",
                               path=r.source, field="personality") from None
            if s.unit == "slots":
                load = planner.demand(quotas)
            else:
                dest = planner.slot_destinations(ids[lo:hi].reshape(-1), quotas)
                load = distinct_per_rank(np.asarray(dest).reshape(hi - lo, r.topk), s.ep)
            peak = max(peak, int(np.max(load)))
        return peak

    def forget(self, call: int) -> None:
        """Drop the cached counts of one router call (streaming: it will not come again)."""
        for key in [k for k in self._counts if k[0] == call]:
            del self._counts[key]

    def step_peaks(self, s: Setting, home: np.ndarray, planner) -> dict[int, int]:
        """Peak per-rank demand of every step (over its routers, dispatches and ranks)."""
        peaks: dict[int, int] = {}
        for call, (step, ids) in enumerate(self.r.calls):
            peaks[step] = max(peaks.get(step, 0), self.call_peak(s, home, planner, call, ids))
        return peaks

    def row(self, s: Setting, home: np.ndarray, planner, pad_multiple: int = DEFAULT_PAD_MULTIPLE,
            decimals: int | None = None, model: str | None = None, hidden: int | None = None,
            bytes_per_element: int = 2) -> dict:
        """One forecast.tsv row (docs/spec.md#tsv-columns)."""
        return self.row_from_peaks(s, self.step_peaks(s, home, planner), pad_multiple,
                                   decimals, model, hidden, bytes_per_element)

    def row_from_peaks(self, s: Setting, peaks: dict[int, int],
                       pad_multiple: int = DEFAULT_PAD_MULTIPLE, decimals: int | None = None,
                       model: str | None = None, hidden: int | None = None,
                       bytes_per_element: int = 2) -> dict:
        """The row of a setting whose per-step peaks are known."""
        r = self.r
        tokens = per_rank_tokens(r.tokens, s.ep, s.micro_batch, r.seq)
        n = tokens * r.topk
        peak = max(peaks.values())
        selected = cap.round_up_to_grid(max(peak, 1), n, pad_multiple, decimals)
        budget = cap.budget_tokens(selected, n)
        drops = sum(1 for p in peaks.values() if p > budget)
        mb = s.micro_batch
        if mb is None and r.seq and r.tokens % s.ep == 0 and tokens % r.seq == 0:
            mb = tokens // r.seq
        return {"source": r.source, "model": model, "ep": s.ep, "micro_batch": mb,
                "placement": s.placement, "personality": s.personality, "unit": s.unit,
                "steps": len(peaks), "uniform_tokens": n, "peak_demand": peak,
                "required_capacity": peak / n, "selected_capacity": selected,
                "selected_budget_tokens": budget,
                "over_provision": cap.over_provision(budget, max(peak, 1)),
                "drop_risk_95": drop_risk_upper(drops, len(peaks)),     # grid.risk's bound
                "buffer_bytes_per_rank": None if hidden is None else
                budget * hidden * bytes_per_element,
                "_micro_batch_given": s.micro_batch is not None}     # not a column


def stream_peaks(calls: Iterable[tuple[int, np.ndarray]],
                 jobs: Sequence[tuple[Forecaster, Setting, np.ndarray, object]]
                 ) -> list[dict[int, int]]:
    """Per-step peaks of every job (engine, setting, home, planner) in ONE pass over the
    router calls: each call is counted once, used by every job, then dropped, so memory is
    one call's ids (plus one integer per step and job) whatever the trace's length."""
    peaks: list[dict[int, int]] = [{} for _ in jobs]
    for call, (step, ids) in enumerate(calls):
        for (engine, s, home, planner), got in zip(jobs, peaks, strict=True):
            got[step] = max(got.get(step, 0), engine.call_peak(s, home, planner, call, ids))
        for engine in {id(j[0]): j[0] for j in jobs}.values():
            engine.forget(call)
    return peaks


def neighbour_eps(ep: int, experts: int) -> list[int]:
    """EP sizes around a campaign's: x1/2, x1, x2, x4 where they divide the experts."""
    cands = [ep // 2] if ep % 2 == 0 else []
    cands += [ep, 2 * ep, 4 * ep]
    return [e for e in cands if e >= 1 and experts % e == 0]


def routing_from_calls(source: str, experts: int, topk: int,
                       calls: Iterable[tuple[int, np.ndarray]], seq: int | None = None) -> Routing:
    """A Routing from (step, ids) pairs whose global batches all hold the same tokens."""
    calls = tuple(calls)
    sizes: Sequence[int] = sorted({ids.shape[0] for _, ids in calls})
    if len(sizes) != 1:
        raise ValueError(f"steps hold different token counts: {list(sizes)}")
    return Routing(source, experts, topk, sizes[0], calls, seq)
