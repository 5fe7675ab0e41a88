"""Simulated timed arms for the pipeline's time step (harness.pipeline.decisions.time_step).

Each arm has a known true ratio to the baseline. A trial median is
`base_ms x ratio x round x launch x trial`: `round` = exp(N(0, round_sd)) shared by every arm
of one rotation round (a slow spell of the machine), `launch` = exp(N(0, launch_sd)) of one
process start (shared by its dispatch and combine), `trial` = exp(N(0, trial_sd)) per trial
and phase. The defaults (2% launch-to-launch, 1% trial-to-trial, 2% per round) are the
spread of a quiet GPU node; the CPU sandbox's is 10-40% (docs/timing-verdicts.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from pathlib import Path

import numpy as np

from harness.pipeline.decisions import Context, Outcome, Request, time_step
from harness.results.layout import Cell
from harness.results.rows import AttemptRow, SelectionRow
from harness.runbook.load import load_runbook
from harness.runbook.model import BackendConfig, Runbook, TimingConfig

ROOT = Path(__file__).resolve().parents[2]
MODEL = "QWEN3_30B"
BASELINE = "base"
CAPACITY = "2.00"
_BASE_RUNBOOK: list[Runbook] = []


def runbook(ratios: dict[str, float], launches: int, trials: int,
            resolution: float | None = None, max_launches: int | None = None,
            control: bool = False) -> Runbook:
    """The shipped CPU runbook with one model, the baseline and the simulated arms."""
    if not _BASE_RUNBOOK:
        _BASE_RUNBOOK.append(load_runbook(ROOT / "runbooks" / "local-cpu.yaml"))
    base = _BASE_RUNBOOK[0]
    names = [BASELINE, *ratios]
    backends = tuple(BackendConfig(name=n, kind="reference", module="echo",
                                   select=n == BASELINE, time=True) for n in names)
    timing = TimingConfig(warmup=1, iters=3, trials=trials, launches=launches,
                          baseline=BASELINE, max_cv=0.25, control=control,
                          resolution=resolution, max_launches=max_launches)
    return dataclasses.replace(base, campaign="sim", backends=backends, timing=timing,
                               models=tuple(m for m in base.models if m.name == MODEL))


@dataclasses.dataclass
class Spread:
    """Log-normal spreads (standard deviations of the log) of the simulated launches."""

    launch_sd: float = 0.02
    trial_sd: float = 0.01
    round_sd: float = 0.02
    base_ms: float = 0.5


def simulated_context(ratios: dict[str, float], launches: int, trials: int, seed: int,
                      spread: Spread | None = None, resolution: float | None = None,
                      max_launches: int | None = None, control: bool = False
                      ) -> tuple[Context, Callable[[Request], Outcome | None]]:
    """A Context whose baseline is selected (so the time step runs) and an answer function
    that times each requested launch from the simulation; for pipeline.replay.replay."""
    rb = runbook(ratios, launches, trials, resolution, max_launches, control)
    ctx = Context(rb, (), None)
    ctx.selection[(MODEL, BASELINE)] = SelectionRow(
        campaign=rb.campaign, model=MODEL, backend=BASELINE, selected_capacity=CAPACITY)
    s = spread or Spread()
    rng = np.random.default_rng(seed)
    truth = {BASELINE: 1.0, BASELINE + "~control": 1.0, **ratios}
    made: dict[str, int] = {}
    round_effect: dict[int, float] = {}

    def answer(req: Request) -> Outcome | None:
        if req.purpose != "time":
            return None
        made[req.backend] = made.get(req.backend, 0) + 1
        n = made[req.backend]
        factor = round_effect.setdefault(n, float(np.exp(rng.normal(0, s.round_sd))))
        level = s.base_ms * truth[req.backend] * factor * float(np.exp(rng.normal(0, s.launch_sd)))
        per_trial = [{f"{p}_ms_median": level * (2.0 if p == "combine" else 1.0)
                      * float(np.exp(rng.normal(0, s.trial_sd))) for p in ("dispatch", "combine")}
                     for _ in range(trials)]
        cell = Cell(rb.campaign, req.model, req.backend, "time", req.capacity, n)
        timing = {"per_trial": per_trial, "trials": trials, "iters": 3,
                  "dispatch_ms_median": float(np.median([t["dispatch_ms_median"] for t in per_trial])),
                  "combine_ms_median": float(np.median([t["combine_ms_median"] for t in per_trial])),
                  "step_cv": 0.01, "timer": "perf_counter", "backend_impl": "sim"}
        row = AttemptRow(campaign=rb.campaign, model=req.model, backend=req.backend,
                         purpose="time", attempt=n, capacity=req.capacity, status="ok",
                         cell_dir=f"cells/{cell.name}")
        return Outcome(cell, "ok", None, timing, row, {})

    return ctx, answer


def run_time_step(ctx: Context, answer: Callable[[Request], Outcome | None]) -> Context:
    """Drive the time step of the one model with `answer`; the context holds its rows."""
    pipe: Generator[Request, Outcome, None] = time_step(ctx, MODEL)
    try:
        req = next(pipe)
        while True:
            req = pipe.send(answer(req))
    except StopIteration:
        pass
    return ctx
