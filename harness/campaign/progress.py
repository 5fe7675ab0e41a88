"""Progress display (rich bars on a TTY, plain lines otherwise) and the ETA estimator.

A run of the same work measured before (an earlier campaign of the same result-bearing
runbook parts on this machine: its `history`) predicts itself: the median of those
durations for the same (backend, model, purpose, attempt), scaled by the drift, the median
ratio of this invocation's own durations of that purpose class to their history (the
machine's load now, as that kind of run meets it: short timed launches and compute-heavy
measure runs do not slow down alike; a class not yet run is predicted at its history's
level; a resumed invocation does not take the load of the one it resumes, nor the first
run's one-time start-up, the fork server importing torch, as load). Otherwise, where the
runbook has a cost model (harness.campaign.estimate: a calibrated per-run cost per kind of
machine), a run is its prior times the median measured/prior ratio of the runs of its purpose
measured so far, else of the nearest purpose measured (NEAREST: time <- validate <- measure
<- canary; the canaries replace the prior's scale as soon as they finish; 1 before any run). Without a cost model the estimator fits log(duration) = mu + B[backend] + M[model] + P[purpose] to the measured
durations (backfitting, shrunk toward 0), so a backend measured on one model and a model
measured on another backend both inform an unseen pair. An unmeasured model gets its M from
a log-linear fit of M against its size (MoE layers x hidden x top-k) over the models seen.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from harness.io.redact import redact_text
from harness.vocab import DURATION_CLASS, Purpose

SHRINK = 0.1            # pseudo-observations pulling each factor toward 0 (stability)
DRIFT_RUNS = 64         # the newest own runs the drift (load now vs history) is taken from
PRIOR_RUNS = 8          # the newest runs of a purpose its measured/prior ratio is taken from
DRIFT_BOUNDS = (0.25, 4.0)
ROUNDS = 12             # backfitting rounds
DECAY = 0.9             # weight of a run per newer run: recent durations count more (drift)
# An unmeasured purpose scales its prior by the nearest measured purpose's ratio: time and
# validate runs make the same iterations without recording routing; a measure run records
# it; a canary is one iteration, mostly process start, which load slows the most.
_T, _V, _M, _C = Purpose.TIME, Purpose.VALIDATE, Purpose.MEASURE, Purpose.CANARY
NEAREST: dict[str, tuple[str, ...]] = {
    _T: (_V, _M, _C), _V: (_T, _M, _C), _M: (_V, _T, _C), _C: (_M, _V, _T)}


def model_size(model) -> float:
    """Dispatch volume proxy of a ModelSpec: MoE layers x hidden x top-k."""
    return float(max(1, model.moe_layers) * model.hidden * model.topk)


def purpose_class(purpose: str) -> str:
    """Durations are pooled by run type: measure and validate runs share iterations."""
    return DURATION_CLASS.get(purpose, purpose)


class EtaEstimator:
    """Predicts run durations from those measured so far (per backend, model size, purpose)."""

    def __init__(self, sizes: dict[str, float], iters: dict[str, int] | None = None,
                 prior: Callable[[str, str, str], float | None] | None = None) -> None:
        self.sizes = sizes
        self.prior = prior              # (backend, model, purpose) -> prior seconds, or None
        self.prior_ratios: dict[str, list[float]] = {}  # purpose -> measured / prior, newest last
        self.iters = iters or {}        # purpose class -> iterations per run (prior for unseen)
        self.obs: list[tuple[str, str, str, float]] = []
        self._fit: tuple | None = None
        self.history: dict[tuple, list[float]] = {}     # (backend, model, purpose, attempt)
        self.ratios: dict[str, list[float]] = {}        # class -> own / history, newest last
        self._first = False             # the next run is its invocation's first

    def begin_invocation(self) -> None:
        """Runs recorded from here on are this invocation's. The drift is the load *now*: it is
        taken from them only (an earlier invocation ran under its own load; its runs still
        inform the fit), and not from the first of them, which pays the invocation's one-time
        start-up (the fork server importing torch) that its history's run may not have paid."""
        self.ratios.clear()
        self._first = True

    def add(self, backend: str, model: str, purpose: str, seconds: float,
            attempt: int | None = None) -> None:
        """Record one measured duration of this campaign."""
        if seconds and seconds > 0:
            past = self.history.get((backend, model, purpose, attempt))
            if past and not self._first:
                self.ratios.setdefault(purpose_class(purpose), []).append(seconds / _median(past))
            if not self._first:
                self._prior_ratio(backend, model, purpose, seconds)
            self._first = False
            self._observe(backend, model, purpose, seconds)

    def add_history(self, backend: str, model: str, purpose: str, seconds: float,
                    attempt: int | None = None) -> None:
        """Record one duration an earlier campaign measured for the same work (no drift)."""
        if seconds and seconds > 0:
            self.history.setdefault((backend, model, purpose, attempt), []).append(seconds)
            self._prior_ratio(backend, model, purpose, seconds)
            self._observe(backend, model, purpose, seconds)

    def _prior_ratio(self, backend: str, model: str, purpose: str, seconds: float) -> None:
        """Record measured / prior of one run (when there is a prior)."""
        prior = self.prior(backend, model, purpose) if self.prior is not None else None
        if prior:
            self.prior_ratios.setdefault(str(purpose), []).append(seconds / prior)

    def prior_scale(self, purpose: str) -> float:
        """Median measured / prior of the newest runs of `purpose`, else of the nearest
        purpose measured (NEAREST), else 1 (bounded like the drift)."""
        recent: list[float] = []
        for key in (str(purpose), *NEAREST.get(str(purpose), ())):
            recent = self.prior_ratios.get(key, [])
            if recent:
                break
        if not recent:
            return 1.0
        return min(DRIFT_BOUNDS[1], max(DRIFT_BOUNDS[0], _median(recent[-PRIOR_RUNS:])))

    def source(self) -> str:
        """What the estimate of a run not in the history rests on, in words."""
        n = sum(len(v) for v in self.prior_ratios.values())
        if self.prior is not None:
            return (f"cost model scaled by {n} measured run{'s' if n != 1 else ''}" if n
                    else "cost model (no run measured yet)")
        return f"fit of {len(self.obs)} measured runs" if self.obs else "no estimate"

    def _observe(self, backend: str, model: str, purpose: str, seconds: float) -> None:
        self.obs.append((backend, model, purpose_class(purpose), math.log(seconds)))
        self._fit = None

    def drift(self, purpose: str | None = None) -> float:
        """How much slower (> 1) or faster runs of `purpose`'s class go now than in the
        history (1 while none has run this invocation); every class pooled without one."""
        pooled = [r for rs in self.ratios.values() for r in rs]
        recent = (pooled if purpose is None else
                  self.ratios.get(purpose_class(purpose), []))[-DRIFT_RUNS:]
        if not recent:
            return 1.0
        return min(DRIFT_BOUNDS[1], max(DRIFT_BOUNDS[0], _median(recent)))

    def _fitted(self) -> tuple:
        if self._fit is None:
            self._fit = self._backfit()
        return self._fit

    def _backfit(self) -> tuple:
        """Weighted backfitting of mu and the three factor tables (newest runs weigh most)."""
        n = len(self.obs)
        weights = [DECAY ** (n - 1 - i) for i in range(n)]
        factors: list[dict[str, float]] = [{}, {}, {}]
        mu = 0.0
        for _ in range(ROUNDS):
            mu = sum(w * (o[3] - sum(factors[j].get(o[j], 0.0) for j in range(3)))
                     for w, o in zip(weights, self.obs, strict=True)) / sum(weights)
            for k in range(3):
                sums: dict[str, float] = {}
                counts: dict[str, float] = {}
                for w, obs in zip(weights, self.obs, strict=True):
                    resid = obs[3] - mu - sum(factors[j].get(obs[j], 0.0)
                                              for j in range(3) if j != k)
                    sums[obs[k]] = sums.get(obs[k], 0.0) + w * resid
                    counts[obs[k]] = counts.get(obs[k], 0.0) + w
                factors[k] = {key: sums[key] / (counts[key] + SHRINK) for key in sums}
        return mu, factors, self._size_slope(factors[1])

    def _size_slope(self, mfac: dict[str, float]) -> tuple[float, float] | None:
        """(intercept, slope) of M against log(size) over measured models, if >= 2 sizes."""
        pts = [(math.log(self.sizes[m]), v) for m, v in mfac.items() if m in self.sizes]
        xs = {p[0] for p in pts}
        if len(xs) < 2:
            return None
        mx = sum(p[0] for p in pts) / len(pts)
        my = sum(p[1] for p in pts) / len(pts)
        var = sum((p[0] - mx) ** 2 for p in pts)
        slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / var
        return my - slope * mx, slope

    def predict(self, backend: str, model: str, purpose: str,
                attempt: int | None = None) -> float | None:
        """Predicted seconds for one run, or None before any measurement."""
        past = self.history.get((backend, model, purpose, attempt))
        if past:
            return _median(past) * self.drift(purpose)
        prior = self.prior(backend, model, purpose) if self.prior is not None else None
        if prior:
            return prior * self.prior_scale(purpose)
        if not self.obs:
            return None
        mu, (bfac, mfac, pfac), line = self._fitted()
        if model in mfac:
            m = mfac[model]
        elif line is not None and model in self.sizes:
            m = line[0] + line[1] * math.log(self.sizes[model])
        else:
            m = 0.0
        return math.exp(mu + bfac.get(backend, 0.0) + m + self._purpose(pfac, purpose))

    def _purpose(self, pfac: dict[str, float], purpose: str) -> float:
        """The purpose factor; an unmeasured purpose scales with its iteration count, at the
        per-log-iteration slope seen between two measured purposes (else 0)."""
        cls = purpose_class(purpose)
        if cls in pfac:
            return pfac[cls]
        seen = [(math.log(self.iters[c]), v) for c, v in pfac.items() if self.iters.get(c)]
        if cls not in self.iters or len({x for x, _ in seen}) < 2:
            return 0.0
        (x0, y0), (x1, y1) = min(seen), max(seen)
        slope = max(0.0, (y1 - y0) / (x1 - x0))
        return y1 + slope * (math.log(self.iters[cls]) - x1)

    def eta(self, remaining: Iterable[tuple], parallel: int = 1) -> float | None:
        """Seconds for the remaining (backend, model, purpose[, attempt]) runs, or None (no
        data)."""
        total = 0.0
        for run in remaining:
            pred = self.predict(*run)
            if pred is None:
                return None
            total += pred
        return total / max(1, parallel)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def fmt_s(seconds: float | None) -> str:
    """12.3 s / 4 min 05 s / 1 h 02 min; 'unknown' for None."""
    if seconds is None:
        return "unknown (no run measured yet)"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class ProgressView:
    """Overall and current-stage bars on a TTY; banner and per-cell lines always."""

    def __init__(self, stream=None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.fallback: Path | None = None   # where lines go once stdout's reader is gone
        self.lost = False
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bars = tty if enabled is None else enabled
        self._progress = None
        self._overall = None
        self._stage = None
        self._stage_name = None
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        """One plain line (printed above the bars when they are shown), secrets redacted."""
        text = redact_text(text)
        if self.lost:
            self._to_fallback(text)
            return
        try:
            if self._progress is not None:
                self._progress.console.print(text, highlight=False, markup=False)
            else:
                print(text, file=self.stream, flush=True)
        except BrokenPipeError:
            self._lost_reader()
            self._to_fallback(text)
        except ValueError:              # stdout closed by then: the same as a lost reader
            self._to_fallback(text)

    def _lost_reader(self) -> None:
        """stdout's reader went away (`epcap run | head`): SIGPIPE is not a reason to stop.
        Point stdout at /dev/null (so no later write or the exit flush fails), drop the bars,
        and go on writing lines to the fallback log."""
        self._progress = None
        self.bars = False
        self.lost = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        self._to_fallback(f"epcap: stdout's reader went away at {time.strftime('%H:%M:%S')}; "
                          "the campaign goes on, its lines continue here")

    def _to_fallback(self, text: str) -> None:
        if self.fallback is None:
            return
        try:
            with open(self.fallback, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        except OSError:
            pass

    def start(self, done: int, total: int) -> None:
        if not self.bars:
            return
        from rich.console import Console  # lazy: rich only with bars on a TTY
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TextColumn("{task.fields[eta]}"),
                                  console=Console(file=self.stream), transient=True)
        self._progress.start()
        self._overall = self._progress.add_task("overall", total=total, completed=done, eta="")

    def update(self, done: int, total: int, stage: str, stage_done: int, stage_total: int,
               eta_s: float | None, current: str = "") -> None:
        if self._progress is None:
            return
        eta = f"ETA {fmt_s(eta_s)}" if eta_s is not None else "ETA unknown"
        self._progress.update(self._overall, total=total, completed=done, eta=eta)
        if stage != self._stage_name:
            if self._stage is not None:
                self._progress.remove_task(self._stage)
            self._stage = self._progress.add_task(stage, total=stage_total, eta="")
            self._stage_name = stage
        self._progress.update(self._stage, total=max(stage_total, 1), completed=stage_done,
                              description=f"{stage}", eta=current)

    def stop(self) -> None:
        """Take the bars down (a reader that left is not an error)."""
        if self._progress is not None:
            try:
                self._progress.stop()
            except (BrokenPipeError, ValueError):
                self._lost_reader()
            self._progress = None
