"""Per-step peaks of a run (docs/spec.md#telemetry): one step = one iteration, all layers and ranks.

A step's peak is the maximum `actual_valid_recv` over its dispatch rows; the step dropped
when any of its rows is saturated (`actual_valid_recv >= budget`), and its peak is then only
a lower bound. The drop-risk figures (harness.grid.risk) are computed from these peaks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import BadInput
from harness.telemetry.summary import FIELDS, PathLike, rows_array


@dataclass(frozen=True)
class StepPeaks:
    """Per-step peaks of one run, in iteration order."""

    iters: tuple[int, ...]
    peaks: tuple[int, ...]             # max actual_valid_recv of each step (slots)
    saturated: tuple[bool, ...]        # the step dropped: its peak is a lower bound

    @property
    def steps(self) -> int:
        """Number of steps with at least one dispatch row."""
        return len(self.iters)

    @property
    def drops(self) -> int:
        """Steps with a saturated row."""
        return sum(self.saturated)

    @property
    def peak(self) -> int | None:
        """The run's peak over its steps (None without steps)."""
        return max(self.peaks) if self.peaks else None

    def exact_peaks(self) -> list[int]:
        """The peaks that are measurements (the steps that did not saturate)."""
        return [p for p, s in zip(self.peaks, self.saturated, strict=True) if not s]

    def to_dict(self) -> dict:
        """JSON-ready form (events store it; `from_dict` reads it back)."""
        return {"iters": list(self.iters), "peaks": list(self.peaks),
                "saturated": list(self.saturated)}

    @classmethod
    def from_dict(cls, data: dict) -> StepPeaks:
        """The inverse of `to_dict`; a bad shape is bad input."""
        try:
            iters, peaks, sat = (list(data[k]) for k in ("iters", "peaks", "saturated"))
        except (KeyError, TypeError):
            raise BadInput("expected iters, peaks and saturated lists", field="steps") from None
        if not len(iters) == len(peaks) == len(sat):
            raise BadInput("iters, peaks and saturated differ in length", field="steps")
        return cls(tuple(int(i) for i in iters), tuple(int(p) for p in peaks),
                   tuple(bool(s) for s in sat))


def from_columns(iters: Sequence[int], actual: Sequence[int], budget: Sequence[int],
                 warmup: int = 0) -> StepPeaks:
    """Per-step peaks from parallel columns of dispatch rows (iter, actual_valid_recv, budget).

    Rows with iter < warmup are not used, as for the run's requirement.
    """
    if warmup < 0:
        raise BadInput(f"must be >= 0, got {warmup}", field="warmup")
    if not len(iters) == len(actual) == len(budget):
        raise BadInput("columns differ in length", field="rows")
    peak: dict[int, int] = {}
    saturated: dict[int, bool] = {}
    for it, act, bud in zip(iters, actual, budget, strict=True):
        it, act = int(it), int(act)
        if it < warmup:
            continue
        peak[it] = max(peak.get(it, act), act)
        saturated[it] = saturated.get(it, False) or act >= int(bud)
    order = sorted(peak)
    return StepPeaks(tuple(order), tuple(peak[i] for i in order),
                     tuple(saturated[i] for i in order))


def step_peaks(paths: PathLike | Iterable[PathLike], warmup: int = 0,
               tags: dict[str, str] | None = None) -> StepPeaks:
    """Per-step peaks of one run's logs (its well-formed dispatch rows, read as one stream)."""
    if warmup < 0:
        raise BadInput(f"must be >= 0, got {warmup}", field="warmup")
    rows = rows_array(paths, tags)
    iters, actual, budget = (rows[:, FIELDS.index(c)] for c in ("iter", "actual_valid_recv",
                                                                 "budget"))
    kept = iters >= warmup
    if not kept.any():
        return StepPeaks((), (), ())
    steps, at = np.unique(iters[kept], return_inverse=True)
    peaks = np.full(len(steps), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(peaks, at, actual[kept])
    saturated = np.zeros(len(steps), bool)
    np.logical_or.at(saturated, at, actual[kept] >= budget[kept])
    return StepPeaks(tuple(int(i) for i in steps), tuple(int(p) for p in peaks),
                     tuple(bool(s) for s in saturated))
